"""The toy duplicate-report set of the retrieval task's tests: seven reports, four pairs over two splits."""
import json
from pathlib import Path

REPORTS = [
    {"id": "1", "title": "printer jams", "description": "the printer on floor two jams every morning"},
    {"id": "2", "title": "printer paper jam", "description": "paper jam in the floor two printer"},
    {"id": "3", "title": "vpn drops", "description": "vpn tunnel drops after the certificate expired"},
    {"id": "4", "title": "vpn disconnects", "description": "certificate expired so the vpn disconnects"},
    {"id": "5", "title": "invoice timeout", "description": "payment gateway times out on invoice"},
    {"id": "6", "title": "printer jam again", "description": "floor two printer jams with paper"},
    {"id": "7", "title": "disk full", "description": "mail server disk is full"},
]
PAIRS = [
    {"duplicate_id": "2", "master_id": "1", "split": "test"},
    {"duplicate_id": "6", "master_id": "2", "split": "train"},
    {"duplicate_id": "4", "master_id": "3", "split": "test"},
    {"duplicate_id": "9", "master_id": "5", "split": "test"},  # unknown query report
]


def write_jsonl(path: Path, rows: list, bad_line: bool = False) -> str:
    lines = [json.dumps(r) for r in rows] + (["{not json"] if bad_line else [])
    path.write_text("\n".join(lines) + "\n")
    return str(path)
