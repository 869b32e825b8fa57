"""The built-in export formats, one module each (`ExportFormatSpec`, models/export_spec.py); the registry is
models/export.py."""
