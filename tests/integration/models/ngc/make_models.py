"""Writes the test models of the NGC-scale stand-in backends, and the answers they must give.

Why a generator: the models are binary (ONNX, TorchScript); this file is their source, and
expected.json holds the answers computed here, on the host, by onnxruntime and torch, so the
checks compare the server's answers against the libraries' own, not against hand-typed numbers.

Run it with torch 2.5.1, the version whose libtorch the pytorch backend serves, so that the
TorchScript files and the expected answers come from the same torch. Here that torch is the
wheel the stand-ins use (pip cannot resolve its CUDA 12.4 pins against the 12.6 wheels, hence
--no-deps; the nvidia-* wheels give `import torch` its CUDA libraries):

    python3 -m venv /tmp/v && /tmp/v/bin/pip install numpy onnx onnxruntime
    /tmp/v/bin/pip install --no-deps torch-2.5.1-cp311-*.whl nvidia_*.whl
    /tmp/v/bin/pip install filelock typing-extensions sympy==1.13.1 networkx jinja2 fsspec
    /tmp/v/bin/python tests/integration/models/ngc/make_models.py

Idempotent: the same inputs give the same files (fixed seeds).
"""

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import torch
from onnx import TensorProto, helper

HERE = Path(__file__).resolve().parent
# The oldest IR and opset that hold these graphs: ONNX Runtime 1.19 reads them.
IR_VERSION, OPSET = 8, 13


def write(path: Path, data: bytes | str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def case(model: str, inputs: dict, outputs: dict, tolerance: float = 1e-5) -> dict:
    """One request and its answers, as KServe v2 JSON would carry them."""

    def tensors(arrays: dict) -> list:
        return [
            {"name": n, "datatype": DATATYPES[a.dtype.name], "shape": list(a.shape), "data": a.flatten().tolist()}
            for n, a in arrays.items()
        ]

    return {"model": model, "inputs": tensors(inputs), "outputs": tensors(outputs), "tolerance": tolerance}


DATATYPES = {
    "float32": "FP32", "float64": "FP64", "int64": "INT64", "int32": "INT32",
    "int8": "INT8", "uint8": "UINT8", "bool": "BOOL",
}


def onnx_types() -> dict:
    """ngc_onnx_types: one output per datatype the onnxruntime backend must serve, batched."""
    specs = [  # input, output, ONNX type, op, numpy type, per-item dims
        ("X", "Y", TensorProto.FLOAT, "Affine", np.float32, [4]),
        ("D", "DD", TensorProto.DOUBLE, "Square", np.float64, [2]),
        ("N", "NN", TensorProto.INT64, "Square", np.int64, [3]),
        ("I", "II", TensorProto.INT32, "Square", np.int32, [2]),
        ("S", "SS", TensorProto.INT8, "Identity", np.int8, [3]),
        ("U", "UU", TensorProto.UINT8, "Identity", np.uint8, [3]),
        ("B", "NB", TensorProto.BOOL, "Not", np.bool_, [2]),
    ]
    nodes, inputs, outputs = [], [], []
    for name, out, kind, op, _, dims in specs:
        inputs.append(helper.make_tensor_value_info(name, kind, ["batch"] + dims))
        outputs.append(helper.make_tensor_value_info(out, kind, ["batch"] + dims))
        if op == "Affine":  # Y = X * 2 + 1
            nodes += [helper.make_node("Mul", [name, "two"], ["x2"]), helper.make_node("Add", ["x2", "one"], [out])]
        elif op == "Square":
            nodes.append(helper.make_node("Mul", [name, name], [out]))
        else:
            nodes.append(helper.make_node(op, [name], [out]))
    constants = [helper.make_tensor("two", TensorProto.FLOAT, [1], [2.0]), helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])]
    graph = helper.make_graph(nodes, "types", inputs, outputs, initializer=constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    folder = HERE / "ngc_onnx_types"
    write(folder / "1" / "model.onnx", model.SerializeToString())
    lines = ['name: "ngc_onnx_types"', 'backend: "onnxruntime"', "max_batch_size: 8"]
    for section, index in (("input", 0), ("output", 1)):
        entries = ", ".join(
            f'{{ name: "{s[index]}" data_type: TYPE_{DATATYPES[np.dtype(s[4]).name]} dims: {s[5]} }}' for s in specs
        )
        lines.append(f"{section} [ {entries} ]")
    lines.append("instance_group [ { kind: KIND_CPU count: 1 } ]")
    write(folder / "config.pbtxt", "\n".join(lines) + "\n")
    rng = np.random.default_rng(16)
    feeds = {}
    for name, _, _, _, dtype, dims in specs:
        shape = [2] + dims
        if dtype == np.bool_:
            feeds[name] = rng.integers(0, 2, shape).astype(np.bool_)
        elif np.issubdtype(dtype, np.integer):
            feeds[name] = rng.integers(-5 if np.issubdtype(dtype, np.signedinteger) else 0, 9, shape).astype(dtype)
        else:
            feeds[name] = rng.standard_normal(shape).astype(dtype)
    session = onnxruntime.InferenceSession(str(folder / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    answers = dict(zip([s[1] for s in specs], session.run([s[1] for s in specs], feeds)))
    return case("ngc_onnx_types", feeds, answers)


def onnx_configless() -> dict:
    """ngc_onnx_configless: no config.pbtxt; a dynamic first dim, so the backend makes it batch."""
    rng = np.random.default_rng(17)
    weight = rng.standard_normal((3, 2)).astype(np.float32)
    bias = rng.standard_normal(2).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["features", "weight"], ["product"]), helper.make_node("Add", ["product", "bias"], ["scores"])],
        "linear",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 2])],
        initializer=[onnx.numpy_helper.from_array(weight, "weight"), onnx.numpy_helper.from_array(bias, "bias")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    write(HERE / "ngc_onnx_configless" / "1" / "model.onnx", model.SerializeToString())
    features = rng.standard_normal((3, 3)).astype(np.float32)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return case("ngc_onnx_configless", {"features": features}, {"scores": session.run(None, {"features": features})[0]})


class Types(torch.nn.Module):
    """Three inputs of three datatypes, three outputs: the input__i / output__k naming."""

    def forward(self, x: torch.Tensor, i: torch.Tensor, d: torch.Tensor):
        return x * 3.0 - 0.5, i * 2 + 1, torch.sqrt(d)


class Embedder(torch.nn.Module):
    """nn.Embedding + nn.Linear: token ids (INT64, any length) to 3 scores per token."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(100, 8)
        self.linear = torch.nn.Linear(8, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.linear(self.embedding(ids))


def torchscript_types() -> dict:
    folder = HERE / "ngc_torchscript_types"
    folder.joinpath("1").mkdir(parents=True, exist_ok=True)
    torch.jit.save(torch.jit.script(Types()), str(folder / "1" / "model.pt"))
    write(
        folder / "config.pbtxt",
        'name: "ngc_torchscript_types"\nbackend: "pytorch"\nmax_batch_size: 8\n'
        'input [ { name: "input__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "input__1" data_type: TYPE_INT32 dims: [ 2 ] },'
        ' { name: "input__2" data_type: TYPE_FP64 dims: [ 2 ] } ]\n'
        'output [ { name: "output__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "output__1" data_type: TYPE_INT32 dims: [ 2 ] },'
        ' { name: "output__2" data_type: TYPE_FP64 dims: [ 2 ] } ]\n'
        "instance_group [ { kind: KIND_CPU count: 1 } ]\n",
    )
    x = torch.tensor([[1.0, 2.0, -3.5, 0.25], [0.0, 10.0, 7.0, -1.0]])
    i = torch.tensor([[3, -4], [100, 0]], dtype=torch.int32)
    d = torch.tensor([[2.0, 9.0], [0.5, 1e6]], dtype=torch.float64)
    outs = Types()(x, i, d)
    names = {"input__0": x, "input__1": i, "input__2": d}
    return case("ngc_torchscript_types", {k: v.numpy() for k, v in names.items()},
                {f"output__{k}": v.numpy() for k, v in enumerate(outs)})


def torch_embedding() -> list:
    torch.manual_seed(16)
    model = Embedder().eval()
    example = torch.randint(0, 100, (2, 5), dtype=torch.int64)
    folder = HERE / "ngc_torch_embedding"
    folder.joinpath("1").mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        traced = torch.jit.trace(model, example)
    torch.jit.save(traced, str(folder / "1" / "model.pt"))
    write(
        folder / "config.pbtxt",
        'name: "ngc_torch_embedding"\nbackend: "pytorch"\nmax_batch_size: 64\n'
        'input [ { name: "input__0" data_type: TYPE_INT64 dims: [ -1 ] } ]\n'
        'output [ { name: "output__0" data_type: TYPE_FP32 dims: [ -1, 3 ] } ]\n'
        "instance_group [ { kind: KIND_CPU count: 1 } ]\n",
    )
    cases = []
    # Other lengths and batch sizes than the traced example: the trace must generalize.
    for shape in ((1, 7), (3, 2)):
        ids = torch.randint(0, 100, shape, dtype=torch.int64)
        with torch.no_grad():
            scores = model(ids)
        cases.append(case("ngc_torch_embedding", {"input__0": ids.numpy()}, {"output__0": scores.numpy()}, tolerance=1e-6))
    return cases


SAMPLES = HERE.parents[3] / "composer" / "samples" / "models"


def samples() -> list:
    """The project's samples onnx_affine and torchscript_affine (max_batch_size 0; made by
    scripts/make-samples, the TorchScript with a newer torch): their answers come from loading
    those very files, so a pass also shows that libtorch 2.5.1 reads the newer torch's file."""
    x = np.array([1.0, 2.0, -3.5, 0.25], dtype=np.float32)
    session = onnxruntime.InferenceSession(str(SAMPLES / "onnx_affine" / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    scripted = torch.jit.load(str(SAMPLES / "torchscript_affine" / "1" / "model.pt"))
    return [
        case("onnx_affine", {"INPUT0": x}, {"OUTPUT0": session.run(["OUTPUT0"], {"INPUT0": x})[0]}),
        case("torchscript_affine", {"input__0": x}, {"output__0": scripted(torch.from_numpy(x)).numpy()}),
    ]


def tensorrt_plan() -> None:
    """ngc_tensorrt_plan: any bytes as the plan; the backend must refuse it without a GPU."""
    folder = HERE / "ngc_tensorrt_plan"
    write(folder / "1" / "model.plan", b"triton-composer test plan: not a TensorRT engine\n")
    write(
        folder / "config.pbtxt",
        'name: "ngc_tensorrt_plan"\nplatform: "tensorrt_plan"\nmax_batch_size: 8\n'
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]\n',
    )


def main() -> int:
    if not torch.__version__.startswith("2.5."):
        print(f"make_models.py: needs torch 2.5 (libtorch 2.5.1 serves these models), not {torch.__version__}", file=sys.stderr)
        return 2
    cases = [onnx_types(), onnx_configless(), torchscript_types(), *torch_embedding(), *samples()]
    tensorrt_plan()
    write(HERE / "expected.json", json.dumps({"torch": torch.__version__, "onnxruntime": onnxruntime.__version__,
                                              "cases": cases}, indent=1) + "\n")
    print("make_models.py: wrote", ", ".join(sorted(p.name for p in HERE.iterdir() if p.is_dir())), "and expected.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
