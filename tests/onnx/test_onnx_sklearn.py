"""scikit-learn models through skl2onnx: ember's ``ai.onnx.ml`` operators (tree ensembles, linear
models, support vector machines, Scaler, Normalizer, ArrayFeatureExtractor) give scikit-learn's
own predictions and probabilities. Trained here on the data sets scikit-learn ships (iris, diabetes)."""

import numpy as np
import pytest

pytest.importorskip("onnx")
sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")
pytestmark = [
    pytest.mark.onnx,
    pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning"),
    pytest.mark.filterwarnings("ignore:.*probability=True.*:FutureWarning"),  # scikit-learn 1.9 deprecates SVC's
]

from sklearn import (
    cluster,
    datasets,
    decomposition,
    ensemble,
    impute,
    linear_model,
    naive_bayes,
    neighbors,
    neural_network,
    pipeline,
    preprocessing,
    svm,
    tree,
)

import ember
import ember.onnx


def iris():
    x, y = datasets.load_iris(return_X_y=True)
    return x.astype(np.float32), y


def diabetes():
    x, y = datasets.load_diabetes(return_X_y=True)
    return x.astype(np.float32), y


MODELS = {
    "random forest classifier": lambda: (
        ensemble.RandomForestClassifier(n_estimators=7, max_depth=5, random_state=0),
        iris(),
    ),
    "gradient boosting, binary": lambda: (
        ensemble.GradientBoostingClassifier(n_estimators=6, random_state=0),
        (iris()[0], iris()[1] == 1),
    ),
    "gradient boosting regressor": lambda: (
        ensemble.GradientBoostingRegressor(n_estimators=6, random_state=0),
        diabetes(),
    ),
    "random forest regressor": lambda: (
        ensemble.RandomForestRegressor(n_estimators=5, max_depth=4, random_state=0),
        diabetes(),
    ),
    "decision tree": lambda: (tree.DecisionTreeClassifier(max_depth=3, random_state=0), iris()),
    "scaler + logistic regression": lambda: (
        pipeline.make_pipeline(preprocessing.StandardScaler(), linear_model.LogisticRegression()),
        iris(),
    ),
    "logistic regression, binary": lambda: (linear_model.LogisticRegression(), (iris()[0], iris()[1] == 2)),
    "min-max + normalizer + ridge": lambda: (
        pipeline.make_pipeline(preprocessing.MinMaxScaler(), preprocessing.Normalizer(), linear_model.Ridge()),
        diabetes(),
    ),
    "k nearest neighbours": lambda: (neighbors.KNeighborsClassifier(), iris()),
    "SVC with probabilities": lambda: (svm.SVC(probability=True, random_state=0), iris()),
    "SVC, polynomial kernel": lambda: (svm.SVC(kernel="poly", degree=2, probability=True, random_state=0), iris()),
    "SVC, binary": lambda: (svm.SVC(probability=True, random_state=0), (iris()[0], iris()[1] == 1)),
    "SVC, decision values": lambda: (svm.SVC(kernel="sigmoid", gamma=0.01), iris()),
    "NuSVC": lambda: (svm.NuSVC(probability=True, random_state=0), iris()),
    "SVR": lambda: (svm.SVR(), diabetes()),
    "Gaussian naive Bayes": lambda: (naive_bayes.GaussianNB(), iris()),
    "AdaBoost": lambda: (ensemble.AdaBoostClassifier(n_estimators=5, random_state=0), iris()),
    "SVR, linear kernel": lambda: (svm.SVR(kernel="linear"), diabetes()),
    "MLP classifier": lambda: (
        neural_network.MLPClassifier(hidden_layer_sizes=(16,), max_iter=300, random_state=0),
        iris(),
    ),
}


def convert(name):
    model, (x, y) = MODELS[name]()
    model.fit(x, y.astype(np.int64) if y.dtype == bool else y)
    classifier = sklearn.base.is_classifier(model)
    onx = skl2onnx.to_onnx(model, x[:1], options={"zipmap": False} if classifier else None)
    return model, x, onx.SerializeToString(), classifier


@pytest.mark.parametrize("name", list(MODELS))
def test_scikit_learn_model_matches_scikit_learn(name):
    model, x, onx, classifier = convert(name)
    out = ember.onnx.load(onx)(ember.tensor(x))
    if classifier:
        labels, scores = out
        np.testing.assert_array_equal(labels.numpy(), model.predict(x))
        if hasattr(model, "predict_proba"):  # float32 kernels: libsvm's probabilities to ~1e-5
            np.testing.assert_allclose(scores.numpy(), model.predict_proba(x), rtol=1e-4, atol=2e-5)
        else:
            np.testing.assert_allclose(scores.numpy(), model.decision_function(x), rtol=1e-4, atol=1e-4)
    else:
        np.testing.assert_allclose(out.numpy().reshape(-1), model.predict(x), rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("backend", ["python", "numba"])
def test_a_forest_runs_on_other_backends(backend):
    if backend == "numba":
        pytest.importorskip("ember_numba")
    model, x, onx, _ = convert("random forest classifier")
    labels, probabilities = ember.onnx.load(onx).to(backend)(ember.tensor(x[::5], backend=backend))
    np.testing.assert_array_equal(labels.numpy(), model.predict(x[::5]))
    np.testing.assert_allclose(probabilities.numpy(), model.predict_proba(x[::5]), rtol=1e-5, atol=1e-6)


NAMES = np.array(["setosa", "versicolor", "virginica"])
STRING_LABELLED = {  # the three classifier encodings with classlabels_strings, and binary ones
    "logistic regression (LinearClassifier)": lambda: linear_model.LogisticRegression(),
    "random forest (TreeEnsembleClassifier)": lambda: ensemble.RandomForestClassifier(5, max_depth=3, random_state=0),
    "SVC (SVMClassifier)": lambda: svm.SVC(probability=True, random_state=0),
    "SVC, decision values, binary": lambda: svm.SVC(kernel="linear"),
    "logistic regression, binary": lambda: linear_model.LogisticRegression(),
}


@pytest.mark.parametrize("name", list(STRING_LABELLED))
@pytest.mark.parametrize("backend", ["numpy", "python"])
def test_string_class_labels_match_scikit_learn(name, backend):
    x, y = iris()
    labels = NAMES[y] if "binary" not in name else np.where(y == 2, "yes", "no")
    model = STRING_LABELLED[name]().fit(x, labels)
    onx = skl2onnx.to_onnx(model, x[:1], options={"zipmap": False})
    got, scores = ember.onnx.load(onx.SerializeToString()).to(backend)(ember.tensor(x, backend=backend))
    assert got.dtype is ember.string
    assert got.tolist() == model.predict(x).tolist()
    want = model.predict_proba(x) if hasattr(model, "predict_proba") else model.decision_function(x)
    if want.ndim == 1:  # a binary SVC's one decision value d: skl2onnx writes (d, -d), as onnxruntime gives
        want = np.stack([want, -want], 1)
    np.testing.assert_allclose(scores.numpy(), want, rtol=1e-4, atol=2e-5 if hasattr(model, "predict_proba") else 1e-4)


@pytest.mark.parametrize("labels", ["strings", "integers"])
def test_zipmap_is_a_list_of_dicts_as_onnxruntime_returns_it(labels):
    import onnxruntime as ort

    x, y = iris()
    model = linear_model.LogisticRegression().fit(x, NAMES[y] if labels == "strings" else y)
    onx = skl2onnx.to_onnx(model, x[:1]).SerializeToString()  # ZipMap: skl2onnx's default
    got_labels, got = ember.onnx.load(onx)(ember.tensor(x))
    want_labels, want = ort.InferenceSession(onx, providers=["CPUExecutionProvider"]).run(None, {"X": x})
    assert got_labels.tolist() == want_labels.tolist() == model.predict(x).tolist()
    assert isinstance(got, list) and len(got) == len(want) and [list(d) for d in got] == [list(d) for d in want]
    for g, w, p in zip(got, want, model.predict_proba(x)):
        assert all(type(k) is type(next(iter(w))) for k in g)  # str keys, or int keys
        np.testing.assert_allclose(list(g.values()), list(w.values()), rtol=1e-6)
        np.testing.assert_allclose(list(g.values()), p, rtol=1e-4, atol=1e-6)


def test_zipmap_refuses_a_probability_table_of_the_wrong_width():
    from onnx import TensorProto, helper

    node = helper.make_node("ZipMap", ["p"], ["m"], domain="ai.onnx.ml", classlabels_int64s=[1, 2], name="zm")
    seq = helper.make_value_info(
        "m", helper.make_sequence_type_proto(helper.make_map_type_proto(TensorProto.INT64, _float_tensor()))
    )
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("p", TensorProto.FLOAT, [None, 3])], [seq])
    ops = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)]
    m = ember.onnx.load(helper.make_model(g, opset_imports=ops))
    with pytest.raises(ember.onnx.OnnxError, match=r"node 'zm' \(ZipMap, opset 1\): input of shape \[2, 3\]"):
        m(ember.zeros(2, 3))


def _float_tensor():
    from onnx import TensorProto, helper

    return helper.make_tensor_type_proto(TensorProto.FLOAT, [])


def with_gaps():
    x = iris()[0].copy()
    x[::5, 1] = np.nan
    return x


TRANSFORMS = {
    "SimpleImputer (Imputer)": lambda: (impute.SimpleImputer(), with_gaps()),
    "OneHotEncoder": lambda: (preprocessing.OneHotEncoder(sparse_output=False), (iris()[0] * 2).astype(np.int64)),
    "OrdinalEncoder (LabelEncoder)": lambda: (preprocessing.OrdinalEncoder(), (iris()[0] * 2).astype(np.int64)),
    "PCA": lambda: (decomposition.PCA(2), iris()[0]),
    "KMeans distances": lambda: (cluster.KMeans(3, n_init=2, random_state=0), iris()[0]),
}


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_scikit_learn_transform_matches_scikit_learn(name):
    model, x = TRANSFORMS[name]()
    model.fit(x)
    out = ember.onnx.load(skl2onnx.to_onnx(model, x[:1]).SerializeToString())(ember.tensor(x))
    if isinstance(out, tuple):  # a clusterer: (labels, distances)
        np.testing.assert_array_equal(out[0].numpy(), model.predict(x))
        out = out[1]
    # KMeans' graph takes float32 square roots of expanded squared distances: ~3e-5 from float64
    np.testing.assert_allclose(out.numpy(), model.transform(x), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("name", ["random forest classifier", "SVC with probabilities", "scaler + logistic regression"])
def test_the_browser_files_run_without_numpy(name, tmp_path):
    """ember's own files of the model (what `ember.wasm build --onnx` ships) run on the python
    backend in a process that cannot import numpy."""
    import json

    from without_numpy import run_without_numpy

    from ember.onnx import portable

    model, x, onx, _ = convert(name)
    graph, blob = portable.save(onx)
    (tmp_path / "graph.json").write_text(json.dumps(graph))
    (tmp_path / "weights.safetensors").write_bytes(blob)
    (tmp_path / "x.json").write_text(json.dumps(x[::7].tolist()))
    code = (
        "import json, ember\n"
        "from ember.onnx import portable\n"
        "m = portable.restore(json.load(open('graph.json')), open('weights.safetensors', 'rb').read(), 'python')\n"
        "labels, scores = m(ember.tensor(json.load(open('x.json')), dtype='float32', backend='python'))\n"
        "print(json.dumps([labels.tolist(), scores.tolist()]))\n"
    )
    labels, scores = json.loads(run_without_numpy(code, tmp_path))
    np.testing.assert_array_equal(labels, model.predict(x[::7]))
    np.testing.assert_allclose(scores, model.predict_proba(x[::7]), rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("name", ["random forest classifier", "SVC with probabilities"])
def test_too_few_features_are_named(name):
    _, x, onx, _ = convert(name)
    with pytest.raises(ember.onnx.OnnxError, match=r"X has 2 features|X must be \(samples, 4\)"):
        ember.onnx.load(onx)(ember.tensor(x[:, :2]))
