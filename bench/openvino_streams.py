"""OpenVINO int8 encoding with two batches in flight (the backend's async queue, throughput hint) against one batch at
a time (the latency hint a served query uses), through the same encoder and the same batches, beside
sentence-transformers fp32; MiniLM int8 as `lmp export --format openvino-int8` makes it, calibrated on OpenOffice dev.

    python bench/openvino_streams.py [--data ../shared/data] [--limit 1024] [--rounds 3]

Writes bench/results/openvino_streams.json.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import SHARED_DATA, write_result
from encode_throughput import OpenOfficeRetrieval, interleaved_rounds, median_ratios, real_texts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, default=SHARED_DATA)
    parser.add_argument("--limit", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import numpy as np
    from sentence_transformers import SentenceTransformer

    from lmplatform import Encoder
    from lmplatform.models import export_model, packaged_model_path

    texts = real_texts(args.data, args.limit)
    work = Path(tempfile.mkdtemp(prefix="lmp-openvino-streams-"))
    calibration = OpenOfficeRetrieval(args.data).dev_texts()
    folder = export_model("default", "openvino-int8", work / "int8", calibration=calibration).folder
    encoder = Encoder.from_pretrained(folder, backend="openvino")
    lengths = encoder.tokenizer(texts, truncation=True, max_length=encoder.max_seq_length)["input_ids"]
    texts = [texts[i] for i in np.argsort([-len(ids) for ids in lengths], kind="stable")]  # encode's own batches
    st = SentenceTransformer(str(packaged_model_path()), device="cpu")
    st.max_seq_length = encoder.max_seq_length

    def one_at_a_time(batch: list[str]) -> np.ndarray:  # what encode did before: each batch waits for the last
        return np.concatenate([encoder.encode(batch[i:i + args.batch_size], batch_size=args.batch_size)
                               for i in range(0, len(batch), args.batch_size)])

    encoders = {"sentence_transformers_fp32": lambda t: st.encode(t, batch_size=args.batch_size, normalize_embeddings=True),
                "openvino_int8_two_in_flight": lambda t: encoder.encode(t, batch_size=args.batch_size),
                "openvino_int8_one_at_a_time": one_at_a_time}
    rounds = interleaved_rounds(encoders, texts, args.rounds)
    best = {name: max(values) for name, values in rounds.items()}
    ratios = median_ratios(rounds, "sentence_transformers_fp32")
    # The same batches through the same model: the vectors should not differ at all.
    difference = float(np.abs(encoder.encode(texts[:256]) - one_at_a_time(texts[:256])).max())
    gain = median_ratios(rounds, "openvino_int8_one_at_a_time")["openvino_int8_two_in_flight"]
    print(f"[bench] two in flight / one at a time: {gain:.3f}; over sentence-transformers fp32: "
          f"{ratios['openvino_int8_two_in_flight']:.2f}x", flush=True)
    write_result("openvino_streams", {
        "texts": len(texts), "batch_size": args.batch_size, "rounds": rounds, "sentences_per_second": best,
        "ratio_to_sentence_transformers": ratios, "two_in_flight_over_one_at_a_time": gain,
        "max_abs_difference": difference})


if __name__ == "__main__":
    main()
