"""Export a local sentence-transformers model to ONNX, in fp32 or quantised to int8, offline, once.

sentence-transformers' own ONNX backend needs optimum-onnx, which pins an older transformers, so the
transformer is exported here with torch.onnx (TorchScript exporter), its attention and layer norms
fused by onnxruntime's transformer optimizer, and for int8 its weights quantised by onnxruntime's
quantize_dynamic. Pooling and normalisation stay outside the graph (onnx_embedder.py).

The result is cached under `models_dir/<model name>-<hash of the model files and the recipe>/`, so a
changed model, or a changed recipe, exports again. The export runs in a child process
(`python -m services.retrieval.adapters.onnx_export`): tracing and optimising the graph leave ~300-400 MB
in the heap of whatever process does it, which a service would otherwise carry for the rest of its life.
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("cairn.retrieval.onnx_export")

MODEL_FILE = "model-int8.onnx"
FP32_FILE = "model-fp32.onnx"
INFO_FILE = "export.json"
OPSET = 17
# u8 activations, s8 weights quantised per channel. Measured on 200 docs/ paragraphs against PyTorch (mean
# cosine) and on 500-char SciFact chunks (speed vs PyTorch, same threads): s8 per tensor 0.956, 1.6x;
# u8 per tensor 0.980, 1.0x; u8 per channel 0.993, 1.0x; s8 per channel 0.993, 1.6x. (No VNNI on the
# AVX2 CPU measured: u8 weights take a slower kernel.) Bump RECIPE when anything below changes, so
# cached exports are redone.
RECIPE = "torchscript-opset17+ort-bert-fusion+dynamic-int8-u8s8-per-channel-v1"
FP32_RECIPE = "torchscript-opset17+ort-bert-fusion-v1"
MIN_MEAN_COSINE = 0.985
EXPORT_TIMEOUT_S = 900  # seconds: a few on a quiet machine, tens on a loaded one
_CHECK_SENTENCES = [
    "Cairn answers questions from a document collection with cited, grounded answers.",
    "The retrieval service chunks documents, embeds them and stores them in Chroma.",
    "Reciprocal rank fusion merges the keyword and the dense rankings.",
    "What is the capital of France?",
    "ok",
    "Mitochondrial dysfunction is associated with insulin resistance in skeletal muscle of elderly people "
    "and of the offspring of patients with type 2 diabetes, though the direction of causality is unclear.",
    "The quick brown fox jumps over the lazy dog. " * 40,  # longer than the model's window: truncated alike
]


def source_digest(model_path: Path, *, recipe: str = RECIPE) -> str:
    """sha256 of every file in the model directory (path and bytes) and of the recipe."""
    digest = hashlib.sha256(recipe.encode())
    for path in sorted(p for p in Path(model_path).rglob("*") if p.is_file()):
        digest.update(f"\n{path.relative_to(model_path).as_posix()}\n".encode())
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def ensure_int8_model(model_path: Path, *, models_dir: Path) -> Path:
    """The cached int8 ONNX file for `model_path`, exported first if missing (seconds, local, no network)."""
    return _ensure(Path(model_path), Path(models_dir), quantise=True)


def ensure_fp32_model(model_path: Path, *, models_dir: Path) -> Path:
    """The cached fp32 ONNX file for `model_path`: PyTorch's arithmetic, without its per-operator cost."""
    return _ensure(Path(model_path), Path(models_dir), quantise=False)


def _ensure(model_path: Path, models_dir: Path, *, quantise: bool) -> Path:
    recipe, name = (RECIPE, MODEL_FILE) if quantise else (FP32_RECIPE, FP32_FILE)
    target = models_dir / f"{model_path.name}-{source_digest(model_path, recipe=recipe)[:16]}"
    if (target / name).is_file():
        return target / name
    models_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".export-", dir=models_dir))
    work.chmod(0o755)
    try:
        info = run_export(model_path, work, quantise=quantise)
        try:
            os.rename(work, target)  # atomic: a replica exporting at the same time loses the race harmlessly
        except OSError:
            if not (target / name).is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    log.info("onnx model exported", extra={"path": str(target), **info})
    return target / name


def run_export(model_path: Path, out_dir: Path, *, quantise: bool) -> dict[str, object]:
    """Export into `out_dir` in a child process (see the module docstring); what it did, from its INFO_FILE.

    Raises RuntimeError with the child's last words when it fails."""
    command = [sys.executable, "-m", __name__, str(model_path), str(out_dir)] + (["--int8"] if quantise else [])
    done = subprocess.run(command, capture_output=True, text=True, timeout=EXPORT_TIMEOUT_S, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise RuntimeError(f"onnx export of {model_path.name} failed: {last}")
    return json.loads((out_dir / INFO_FILE).read_text())


def main(argv: list[str] | None = None) -> int:
    """`python -m services.retrieval.adapters.onnx_export MODEL_DIR OUT_DIR [--int8]`: the child's side."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("model_path", type=Path)
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--int8", action="store_true")
    args = parser.parse_args(argv)
    info = export_int8(args.model_path, args.out_dir) if args.int8 else export_fp32(args.model_path, args.out_dir)
    (args.out_dir / INFO_FILE).write_text(json.dumps(info, indent=2))
    return 0


def export_int8(model_path: Path, out_dir: Path) -> dict[str, object]:
    """Write out_dir/MODEL_FILE; return what was done and how close it stays to the PyTorch model.

    Raises RuntimeError when the quantised vectors drift from PyTorch's (mean cosine < MIN_MEAN_COSINE).
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    started = time.perf_counter()
    fused = out_dir / "model-fused.onnx"
    _export_fused(model_path, fused)
    exported = time.perf_counter()
    with _quiet_root_logger():  # the quantiser logs a line per tensor, and advice
        quantize_dynamic(
            str(fused), str(out_dir / MODEL_FILE), weight_type=QuantType.QInt8, per_channel=True,
            # The fused ops come from onnxruntime's own domain, which ONNX shape inference cannot type.
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
    fused.unlink()
    quantised = time.perf_counter()
    cosine = _mean_cosine_to_torch(model_path, out_dir / MODEL_FILE)
    if cosine < MIN_MEAN_COSINE:
        raise RuntimeError(f"int8 export of {model_path.name} drifts from PyTorch: mean cosine {cosine:.4f} < {MIN_MEAN_COSINE}")
    return {
        "source": model_path.name,
        "recipe": RECIPE,
        "export_s": round(exported - started, 2),
        "quantise_s": round(quantised - exported, 2),
        "check_mean_cosine": round(cosine, 5),
    }


def export_fp32(model_path: Path, out_dir: Path) -> dict[str, object]:
    """Write out_dir/FP32_FILE. Its user checks its vectors against PyTorch's (single_text.py)."""
    started = time.perf_counter()
    _export_fused(model_path, out_dir / FP32_FILE)
    return {"source": model_path.name, "recipe": FP32_RECIPE, "export_s": round(time.perf_counter() - started, 2)}


def _export_fused(model_path: Path, target: Path) -> None:
    """The transformer (inputs to last hidden state) as ONNX, attention and layer norms fused, at `target`."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from onnxruntime.transformers.optimizer import optimize_model
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(str(model_path))
    # Eager attention traces to plain MatMul/Softmax, which the optimizer fuses into one Attention op.
    model = AutoModel.from_pretrained(str(model_path), attn_implementation="eager").eval()
    takes_types = "token_type_ids" in inspect.signature(model.forward).parameters
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if takes_types else [])

    class LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return self.model(**dict(zip(names, inputs))).last_hidden_state

    example = tuple(torch.ones(2, 16, dtype=torch.long) if n != "token_type_ids" else torch.zeros(2, 16, dtype=torch.long) for n in names)
    traced = target.with_name("model-traced.onnx")
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about Python branches on shapes: checked against PyTorch's vectors
        torch.onnx.export(
            LastHiddenState(), example, str(traced), input_names=names, output_names=["last_hidden_state"],
            dynamic_axes=axes, opset_version=OPSET, dynamo=False,
        )
    with _quiet_root_logger():  # the optimizer logs each fusion it makes, and the saving
        fused = optimize_model(
            str(traced), model_type="bert", num_heads=config.num_attention_heads, hidden_size=config.hidden_size, opt_level=1
        )
        fused.save_model_to_file(str(target))
    traced.unlink()


@contextlib.contextmanager
def _quiet_root_logger() -> Iterator[None]:
    """onnxruntime's tools log through loggers under the root one: only their errors reach the service's log."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    try:
        yield
    finally:
        root.setLevel(level)


def _mean_cosine_to_torch(model_path: Path, onnx_path: Path) -> float:
    from sentence_transformers import SentenceTransformer

    from services.retrieval.adapters.onnx_embedder import OnnxEncoder

    reference = SentenceTransformer(str(model_path), device="cpu").encode(_CHECK_SENTENCES, normalize_embeddings=True)
    candidate = OnnxEncoder.from_file(model_path, onnx_path=onnx_path, threads=1).encode(_CHECK_SENTENCES)
    return float(sum(sum(a * b for a, b in zip(r, c)) for r, c in zip(reference.tolist(), candidate)) / len(_CHECK_SENTENCES))


if __name__ == "__main__":
    sys.exit(main())
