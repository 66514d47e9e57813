"""The string operators (ember/onnx/ops/strings.py) and LabelEncoder/OneHotEncoder over strings,
beside onnxruntime on inputs the official cases do not cover, on numpy and python."""

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402

import ember  # noqa: E402
import ember.onnx  # noqa: E402

S, I64, F, B = TensorProto.STRING, TensorProto.INT64, TensorProto.FLOAT, TensorProto.BOOL
ML = {"": 21, "ai.onnx.ml": 4}


def _model(node, inputs, outputs, opsets=None):
    """A one-node model: ``inputs`` and ``outputs`` are (name, element type) pairs."""
    g = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, t, None) for n, t in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
    )
    ops = opsets or {"": 21}
    return helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in ops.items()], ir_version=10)


def _check(m, *arrays, backend="numpy"):
    """ember's outputs equal onnxruntime's (values, shapes, dtypes)."""
    feeds = {i.name: a for i, a in zip(m.graph.input, arrays)}
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ember.onnx.load(m.SerializeToString()).to(backend)(*[ember.tensor(a, backend=backend) for a in arrays])
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = g.numpy()
        assert g.shape == w.shape and g.dtype == w.dtype, (g, w)
        assert g.tolist() == w.tolist()
    return [g.tolist() for g in got]


def _text(rows):
    return np.array(rows, dtype=object)


@pytest.mark.parametrize("backend", ["numpy", "python"])
def test_string_concat_broadcasts_in_two_dims(backend):
    m = _model(helper.make_node("StringConcat", ["a", "b"], ["y"]), [("a", S), ("b", S)], [("y", S)])
    got = _check(m, _text([["a", "b"], ["c", "的"]]), _text(["-x", ""]), backend=backend)
    assert got == [[["a-x", "b"], ["c-x", "的"]]]


@pytest.mark.parametrize("backend", ["numpy", "python"])
@pytest.mark.parametrize("attrs", [{}, {"delimiter": ","}, {"delimiter": ",", "maxsplit": 1}, {"maxsplit": 1}])
def test_string_split(backend, attrs):
    m = _model(helper.make_node("StringSplit", ["x"], ["y", "n"], **attrs), [("x", S)], [("y", S), ("n", I64)])
    _check(m, _text([["a,b,,c", "  one  two "], ["", "x"]]), backend=backend)


@pytest.mark.parametrize("backend", ["numpy", "python"])
def test_regex_full_match_classes_are_ascii_as_in_re2(backend):
    m = _model(helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=r"\w+@\d+"), [("x", S)], [("y", B)])
    # Arabic-Indic digits and an accented letter: RE2's \d and \w are ASCII-only (Python's re is not,
    # unless re.ASCII, which ember uses)
    got = _check(m, _text(["ab@12", "ab@١٢", "é@1", "ab@"]), backend=backend)
    assert got == [[True, False, False, False]]


def test_regex_full_match_refuses_a_bad_pattern_naming_the_node():
    m = _model(helper.make_node("RegexFullMatch", ["x"], ["y"], pattern="(", name="rx"), [("x", S)], [("y", B)])
    with pytest.raises(ember.onnx.OnnxError, match=r"node 'rx' \(RegexFullMatch, opset 21\): pattern '\(' is not"):
        ember.onnx.load(m)(ember.tensor(["a"]))


@pytest.mark.parametrize("backend", ["numpy", "python"])
@pytest.mark.parametrize("case", ["LOWER", "UPPER", "NONE"])
@pytest.mark.parametrize("sensitive", [0, 1])
def test_string_normalizer(backend, case, sensitive):
    node = helper.make_node(
        "StringNormalizer",
        ["x"],
        ["y"],
        case_change_action=case,
        is_case_sensitive=sensitive,
        stopwords=["The", "a"],
        locale="C",  # onnxruntime's default, en_US.UTF-8, may not be installed
    )
    m = _model(node, [("x", S)], [("y", S)])
    _check(m, _text([["The", "the", "Cat", "A", "a", "dog"]]), backend=backend)
    _check(m, _text(["a", "The"]), backend=backend)


def test_string_normalizer_changes_case_by_unicode_rules():
    node = helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="UPPER", locale="de_DE")
    m = ember.onnx.load(_model(node, [("x", S)], [("y", S)]))
    assert m(ember.tensor(["straße", "é"])).tolist() == ["STRASSE", "É"]


@pytest.mark.parametrize("backend", ["numpy", "python"])
def test_label_encoder_string_to_string_and_int_to_string(backend):
    node = helper.make_node(
        "LabelEncoder",
        ["x"],
        ["y"],
        domain="ai.onnx.ml",
        keys_strings=["a", "b"],
        values_strings=["A", "B"],
    )
    got = _check(_model(node, [("x", S)], [("y", S)], ML), _text([["a", "z"], ["b", "a"]]), backend=backend)
    assert got == [[["A", "_Unused"], ["B", "A"]]]
    node = helper.make_node(
        "LabelEncoder",
        ["x"],
        ["y"],
        domain="ai.onnx.ml",
        keys_int64s=[3, 7],
        values_strings=["three", "seven"],
        default_string="?",
    )
    got = _check(_model(node, [("x", I64)], [("y", S)], ML), np.array([7, 3, 5], dtype=np.int64), backend=backend)
    assert got == [["seven", "three", "?"]]


def test_label_encoder_string_keys_against_numbers_name_the_node():
    node = helper.make_node(
        "LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", keys_strings=["a"], values_int64s=[1], name="enc"
    )
    m = _model(node, [("x", I64)], [("y", I64)], ML)
    with pytest.raises(ember.onnx.OnnxError, match="node 'enc' .*keys of string cannot match an input of int64"):
        ember.onnx.load(m)(ember.tensor([1]))


@pytest.mark.parametrize("backend", ["numpy", "python"])
def test_one_hot_encoder_over_string_categories(backend):
    node = helper.make_node(
        "OneHotEncoder", ["x"], ["y"], domain="ai.onnx.ml", cats_strings=["red", "green", "blue"], zeros=1
    )
    got = _check(_model(node, [("x", S)], [("y", F)], ML), _text([["green", "red"], ["blue", "pink"]]), backend=backend)
    assert got[0][1][1] == [0.0, 0.0, 0.0]  # an unknown category: all zeros


def test_strings_pass_through_movement_nodes():
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
        helper.make_node("Reshape", ["t", "shape"], ["r"]),
        helper.make_node("Gather", ["r", "idx"], ["g"], axis=0),
        helper.make_node("Identity", ["g"], ["y"]),
    ]
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", S, [2, 3])],
        [helper.make_tensor_value_info("y", S, None)],
        [helper.make_tensor("shape", I64, [1], [6]), helper.make_tensor("idx", I64, [2], [5, 0])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    assert _check(m, _text([["a", "b", "c"], ["d", "e", "f"]])) == [["f", "a"]]


def test_a_string_initializer_is_a_constant_not_a_parameter():
    g = helper.make_graph(
        [helper.make_node("StringConcat", ["x", "suffix"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", S, [2])],
        [helper.make_tensor_value_info("y", S, [2])],
        [helper.make_tensor("suffix", S, [], [b"!"])],
    )
    m = ember.onnx.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]))
    assert list(m.parameters()) == [] and m(ember.tensor(["hi", "yo"])).tolist() == ["hi!", "yo!"]


@pytest.mark.parametrize("backend", ["numpy", "python"])
@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
def test_tfidf_vectorizer_over_a_string_pool(backend, mode):
    node = helper.make_node(
        "TfIdfVectorizer",
        ["x"],
        ["y"],
        mode=mode,
        min_gram_length=1,
        max_gram_length=2,
        max_skip_count=1,
        ngram_counts=[0, 3],
        ngram_indexes=[0, 1, 2, 3, 4],
        pool_strings=["a", "b", "c", "a", "b", "b", "c"],
        weights=[1.0, 2.0, 0.5, 3.0, 1.5],
    )
    m = _model(node, [("x", S)], [("y", F)], {"": 9})
    _check(m, _text([["a", "b", "x", "b", "c", "a"], ["c", "c", "a", "a", "b", "b"]]), backend=backend)
