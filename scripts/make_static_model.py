#!/usr/bin/env python3
"""Distil a small static (Model2Vec-format) model from the offline MiniLM, with no download.

No Model2Vec weights can be downloaded on CI or these machines, and the
``model2vec`` package distils only through PyTorch and the Hugging Face Hub, so
this script follows Model2Vec's method with numpy and ONNX Runtime alone:

1. every token of MiniLM's vocabulary goes through the model on its own
   (``[CLS] token [SEP]``), and the model's output at the token is its row (on
   the dev suite, vector mode: 0.460 nDCG@10 mean, against 0.449 with the mean
   over the three positions, as sentence-transformers pools);
2. PCA reduces the 384 dimensions to 256 (centred, not whitened);
3. each row is weighted by its token's frequency, estimated from its rank in
   the vocabulary (Zipf), with SIF's a / (a + p): frequent tokens count less
   (frequencies from wordfreq's English lists instead: 0.432 at a = 1e-3).

The folder is what model2vec and fastembed load: ``model.safetensors`` (one
``embeddings`` tensor), ``tokenizer.json``, ``config.json``, plus
``pms-model.txt`` naming the model, so ``PMS_MODEL_DIR`` alone selects it.
Usage (a few minutes on 2 cores; tests and .ci/run call it; skipped when made):

    python3 scripts/make_static_model.py [MINILM_DIR] [DIR]   # default: .cache/minilm -> .cache/minilm-static
"""
import json
import struct
from pathlib import Path

MODEL_NAME = "pms-test/minilm-static-256"
DIMS = 256
SIF_COEFFICIENT = 1e-4  # Model2Vec's default
BATCH = 512


def token_vectors(source: Path):
    """(vocabulary size, 384) float32: each token's output, alone between [CLS] and [SEP]."""
    import numpy as np
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    size = tokenizer.get_vocab_size()
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(source / "model.onnx"), sess_options=options, providers=["CPUExecutionProvider"])
    out = np.empty((size, 384), dtype=np.float32)
    for start in range(0, size, BATCH):
        ids = np.arange(start, min(start + BATCH, size), dtype=np.int64)
        batch = np.stack([np.full_like(ids, cls_id), ids, np.full_like(ids, sep_id)], axis=1)
        hidden = session.run(None, {"input_ids": batch, "attention_mask": np.ones_like(batch),
                                    "token_type_ids": np.zeros_like(batch)})[0]
        out[start:start + len(ids)] = hidden[:, 1]
    return out


def reduce_and_weight(vectors):
    """PCA to DIMS, then Zipf-rank SIF weights (the vocabulary is ordered roughly by frequency)."""
    import numpy as np

    centred = vectors - vectors.mean(axis=0)
    _, _, components = np.linalg.svd(centred, full_matrices=False)
    reduced = centred @ components[:DIMS].T
    rank = np.arange(2, len(vectors) + 2, dtype=np.float64)
    probability = (1 / rank) / (1 / rank).sum()
    weights = SIF_COEFFICIENT / (SIF_COEFFICIENT + probability)
    return (reduced * weights[:, None]).astype(np.float32)


def write_safetensors(path: Path, name: str, array) -> None:
    """The safetensors layout (a JSON header, then raw little-endian data); one tensor needs no library."""
    data = array.astype("<f4").tobytes()
    header = json.dumps({name: {"dtype": "F32", "shape": list(array.shape), "data_offsets": [0, len(data)]},
                         "__metadata__": {"format": "pt"}}).encode()
    header += b" " * (-len(header) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


def make(source: Path, target: Path) -> Path:
    config = {"model_type": "model2vec", "architectures": ["StaticModel"], "tokenizer_name": "sentence-transformers/all-MiniLM-L6-v2",
              "apply_pca": DIMS, "apply_zipf": True, "pooling": "token", "sif_coefficient": SIF_COEFFICIENT, "hidden_dim": DIMS,
              "seq_length": 1000000, "normalize": True}
    if (target / "pms-model.txt").exists() and json.loads((target / "config.json").read_text()) == config:
        return target  # made already, by this recipe
    target.mkdir(parents=True, exist_ok=True)
    (target / "pms-model.txt").unlink(missing_ok=True)
    write_safetensors(target / "model.safetensors", "embeddings", reduce_and_weight(token_vectors(source)))
    tokenizer = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))
    tokenizer["padding"] = tokenizer["truncation"] = None  # a static model pools any length, unpadded
    (target / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    (target / "config.json").write_text(json.dumps(config, indent=2))
    (target / "pms-model.txt").write_text(MODEL_NAME + "\n")  # written last: its presence means the folder is complete
    return target


if __name__ == "__main__":
    import argparse

    root = Path(__file__).resolve().parent.parent
    parser = argparse.ArgumentParser(prog="make_static_model.py", description="Distil a static (Model2Vec-format) model "
                                     "from the offline MiniLM folder (nothing downloaded); prints the new folder.")
    parser.add_argument("source", nargs="?", type=Path, default=root / ".cache" / "minilm",
                        help="the MiniLM folder (default: .cache/minilm)")
    parser.add_argument("target", nargs="?", type=Path, default=root / ".cache" / "minilm-static",
                        help="the folder to make (default: .cache/minilm-static; kept when made already)")
    args = parser.parse_args()
    print(make(args.source, args.target))
