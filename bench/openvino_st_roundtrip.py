"""Round trip: our OpenVINO exports loaded by sentence-transformers' `backend="openvino"` give our vectors.

MiniLM ('default') is exported with `lmp export`'s code as `openvino` and as `openvino-int8` (calibrated on
OpenOffice dev reports, the served domain's dev split), then loaded by `SentenceTransformer(folder,
backend="openvino")` with OpenVINO's fp32 inference precision. On --texts OpenOffice reports it is compared with
our torch fp32 encoder (the fp32 export: largest absolute difference, target <= 1e-3) and with our own
OpenVINO int8 encoder on the same folder (the int8 export: the same graph, so the same vectors to 1e-3; its
distance to fp32 is the encode bench's drop).

sentence-transformers' OpenVINO backend runs on optimum-intel, which requires transformers < 5.6 (this project
pins transformers 5.24): where it cannot be imported the file records why and nothing else. To run the check
anyway, put optimum-intel and the versions it needs in a folder ahead of the virtual environment: the exports
and our vectors are then made in a child process without that PYTHONPATH, with the project's pinned versions,
and only sentence-transformers runs beside the older ones:

    .venv/bin/pip install --no-deps --target /tmp/st-openvino optimum==2.3.0 optimum-intel==2.2.0 \
        openvino-tokenizers==2026.4.1.0 transformers==5.5.4 tokenizers==0.22.2 huggingface_hub==1.21.0 datasets==4.4.1
    PYTHONPATH=/tmp/st-openvino .venv/bin/python bench/openvino_st_roundtrip.py [--texts 256]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, check, write_result
from encode_throughput import OpenOfficeRetrieval, real_texts

FP32_TOLERANCE = 1e-3


def export_ours(data: Path, count: int, work: Path) -> None:
    """The two exports of MiniLM into `work` (fp32/, int8/) and our vectors of the texts (torch fp32, OpenVINO int8)."""
    import numpy as np

    from lmplatform import Encoder
    from lmplatform.models import export_model

    texts = real_texts(data, count)
    np.save(work / "torch_fp32.npy", Encoder.from_pretrained("default").encode(texts))
    export_model("default", "openvino", work / "fp32")
    int8 = export_model("default", "openvino-int8", work / "int8", calibration=OpenOfficeRetrieval(data).dev_texts()).folder
    np.save(work / "openvino_int8.npy", Encoder.from_pretrained(int8, backend="openvino").encode(texts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=SHARED_DATA, help="The shared data folder (OpenOffice reports).")
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--name", default="openvino_st_roundtrip", help="Result file bench/results/<name>.json.")
    parser.add_argument("--export-to", type=Path, default=None, help=argparse.SUPPRESS)  # the child process's folder
    args = parser.parse_args()

    import numpy as np
    import transformers

    if args.export_to is not None:  # the child process: the project's versions
        export_ours(args.data, args.texts, args.export_to)
        return
    versions = {"transformers": transformers.__version__}
    try:
        import optimum.intel.openvino  # noqa: F401 - what sentence-transformers' OpenVINO backend runs on
    except Exception as exc:  # any failure to import means the backend cannot run here
        reason = f"optimum.intel.openvino cannot be imported ({type(exc).__name__}: {str(exc)[:200]})"
        print(f"skipped: {reason}", flush=True)
        write_result(args.name, {"ran": False, "reason": reason, "versions": versions})
        return
    import os
    import subprocess

    from sentence_transformers import SentenceTransformer

    work = Path(tempfile.mkdtemp(prefix="lmp-openvino-st-"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, __file__, "--data", str(args.data), "--texts", str(args.texts), "--export-to", str(work)],
                   env=env, check=True)
    texts = real_texts(args.data, args.texts)
    reference, ours_int8 = np.load(work / "torch_fp32.npy"), np.load(work / "openvino_int8.npy")
    f32 = {"ov_config": {"INFERENCE_PRECISION_HINT": "f32"}}
    theirs = {name: SentenceTransformer(str(work / name), device="cpu", backend="openvino", model_kwargs=f32).encode(
        texts, batch_size=32, convert_to_numpy=True) for name in ("fp32", "int8")}
    result = {
        "fp32_max_abs_diff_to_torch": float(np.abs(theirs["fp32"] - reference).max()),
        "int8_max_abs_diff_to_ours": float(np.abs(theirs["int8"] - ours_int8).max()),
        "int8_min_cosine_to_torch_fp32": float((theirs["int8"] * reference).sum(axis=1).min()),
    }
    print(result, flush=True)
    checks = {
        "fp32": check("sentence-transformers on our openvino export: max |diff| to torch fp32",
                      result["fp32_max_abs_diff_to_torch"], FP32_TOLERANCE, higher_is_better=False),
        "int8": check("sentence-transformers on our openvino-int8 export: max |diff| to our int8",
                      result["int8_max_abs_diff_to_ours"], FP32_TOLERANCE, higher_is_better=False),
    }
    from importlib.metadata import version

    versions |= {name: version(name) for name in ("sentence-transformers", "optimum-intel", "openvino")}
    write_result(args.name, {"ran": True, "texts": len(texts), "versions": versions, **result, "checks": checks})


if __name__ == "__main__":
    main()
