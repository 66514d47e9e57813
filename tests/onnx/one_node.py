"""One-node ONNX models for the operator tests (float inputs, one float output ``y``), and a
model's output from ember beside a reference runtime's. Imported after the tests' own
``pytest.importorskip("onnx")``."""

from onnx import TensorProto, helper

import ember
import ember.onnx


def model(node, inputs, opsets: dict):
    """``node`` as a model reading the float graph inputs ``inputs``; ``opsets``: domain → version."""
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])


def outputs(m, *arrays, runtime="reference"):
    """``(ember's output, the runtime's)`` for the inputs ``arrays``: ONNX's reference evaluator,
    or onnxruntime."""
    feeds = {i.name: a for i, a in zip(m.graph.input, arrays)}
    if runtime == "reference":
        from onnx.reference import ReferenceEvaluator

        want = ReferenceEvaluator(m).run(None, feeds)[0]
    else:
        import onnxruntime as ort

        want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = ember.onnx.load(m.SerializeToString())(*[ember.tensor(a) for a in arrays]).numpy()
    return got, want
