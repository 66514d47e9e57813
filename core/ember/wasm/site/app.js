// The demo page: load Pyodide and ember from this site, pick a backend, classify drawings.
// All the numbers come from Python (ember.wasm.runtime); this file only moves pixels and paints.
"use strict";

const params = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);
const demo = (window.emberDemo = { timings: {}, backend: null, reasons: [], error: null });

function status(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

function toJs(proxy) {
  const value = proxy.toJs({ dict_converter: Object.fromEntries });
  proxy.destroy();
  return value;
}

async function main() {
  const site = await (await fetch("ember-site.json")).json();
  const base = new URL(".", location.href);
  const pyodide = await loadPyodide({
    indexURL: new URL(site.indexURL, base).href,
    lockFileURL: new URL(site.lockFileURL, base).href,
    packages: site.packages, // ember (+ pluggy), sha256-checked against the patched lock
  });
  if (!pyodide.loadedPackages.ember) {
    // loadPyodide logs a failed package instead of throwing; an integrity error lands here
    throw new Error("ember's wheel did not install (the browser console says why: a sha256 integrity " +
      "failure means a file differs from pyodide-lock.json; rebuild the site)");
  }
  demo.timings.pyodide_ms = performance.now();
  demo.pyodide = pyodide; // for the console and the browser tests
  const want = params.get("backend") || "auto";
  $("backend").value = want;
  const rt = pyodide.pyimport("ember.wasm.runtime");
  let [backend, reasons] = toJs(await rt.choose_backend(want));
  if (backend === "python" && site.numpy.bundled && (want === "auto" || want === "numpy")) {
    // numpy's wheel ships with this site: load it only when WebGPU did not win
    status("Loading numpy…");
    await pyodide.loadPackage("numpy");
    [backend, reasons] = toJs(await rt.choose_backend(want));
  }
  status("Loading the model…");
  demo.backend = backend;
  demo.reasons = reasons;
  const specText = await (await fetch(site.model)).text();
  const spec = JSON.parse(specText);
  const weightsURL = new URL(spec.weights, new URL(site.model, base));
  const weights = new Uint8Array(await (await fetch(weightsURL)).arrayBuffer());
  const classifier = await rt.Classifier.from_text.callPromising(specText, weights, backend);
  demo.timings.model_ms = performance.now();
  demo.predictImages = async (pixels, n) => toJs(await classifier.predict.callPromising(pixels, n));
  demo.predictDrawing = async (gray, w, h) => {
    const out = await classifier.predict_drawing.callPromising(gray, w, h);
    return out === undefined || out === null ? null : toJs(out);
  };
  demo.selfcheck = async () => toJs(await pyodide.pyimport("ember.wasm.selfcheck").run.callPromising());
  const inputSize = spec.input_shape.reduce((a, b) => a * b); // 784 for MNIST; an ONNX model's own C*H*W
  const warm = await demo.predictImages(new Uint8Array(inputSize), 1); // compiles shaders, warms caches
  demo.timings.first_prediction_ms = performance.now();
  demo.timings.warmup_ms = warm.ms;
  $("model").textContent = `${spec.model} on ${spec.dataset}` +
    (spec.checkpoint.eval_accuracy ? ` (test accuracy ${(100 * spec.checkpoint.eval_accuracy).toFixed(1)}%)` : "");
  status(`Ready on the ${backend} backend. Draw a digit.`);
  $("why").textContent = reasons.length ? `Passed over: ${reasons.join("; ")}.` : "";
  showTimings();
}

function showTimings(last) {
  const t = demo.timings;
  const s = (ms) => (ms / 1000).toFixed(1) + " s";
  let text = `Pyodide ${s(t.pyodide_ms)} · model ${s(t.model_ms - t.pyodide_ms)} · first prediction at ${s(t.first_prediction_ms)}`;
  if (last) text += ` · last ${last.toFixed(1)} ms`;
  $("timings").textContent = text;
}

// ------------------------------------------------------------------ drawing
const canvas = $("canvas");
const ctx = canvas.getContext("2d", { willReadFrequently: true });
function clear() {
  ctx.fillStyle = "#000";
  ctx.fillRect(0, 0, canvas.width, canvas.height);
  $("preview").getContext("2d").clearRect(0, 0, 28, 28);
  $("digit").textContent = "·";
  $("confidence").textContent = "draw a digit on the left";
  drawBars(null);
}
clear();
ctx.strokeStyle = "#fff";
ctx.lineWidth = 22;
ctx.lineCap = ctx.lineJoin = "round";
let last = null;
const at = (e) => {
  const r = canvas.getBoundingClientRect();
  return [(e.clientX - r.left) * canvas.width / r.width, (e.clientY - r.top) * canvas.height / r.height];
};
canvas.addEventListener("pointerdown", (e) => {
  canvas.setPointerCapture(e.pointerId);
  last = at(e);
  ctx.beginPath();
  ctx.arc(last[0], last[1], ctx.lineWidth / 2, 0, 2 * Math.PI);
  ctx.fillStyle = "#fff";
  ctx.fill();
});
canvas.addEventListener("pointermove", (e) => {
  if (!last) return;
  const p = at(e);
  ctx.beginPath();
  ctx.moveTo(last[0], last[1]);
  ctx.lineTo(p[0], p[1]);
  ctx.stroke();
  last = p;
});
canvas.addEventListener("pointerup", () => {
  last = null;
  classifyCanvas();
});
$("clear").addEventListener("click", clear);
$("backend").addEventListener("change", (e) => {
  params.set("backend", e.target.value);
  location.search = params.toString();
});

let busy = Promise.resolve();
function classifyCanvas() {
  busy = busy.then(async () => {
    if (!demo.predictDrawing) return;
    const rgba = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
    const gray = new Uint8Array(canvas.width * canvas.height);
    for (let i = 0; i < gray.length; i++) gray[i] = rgba[4 * i];
    const out = await demo.predictDrawing(gray, canvas.width, canvas.height);
    if (!out) return;
    demo.lastDrawing = out;
    showPreview(out.input);
    const k = out.classes[0];
    $("digit").textContent = out.labels ? out.labels[k] : String(k);
    $("confidence").textContent = `${(100 * out.probs[0][k]).toFixed(1)}% · ${out.ms.toFixed(1)} ms on ${out.backend}`;
    drawBars(out.probs[0]);
    showTimings(out.ms);
  }).catch((err) => { status(String(err), true); });
  return busy;
}
demo.classifyCanvas = classifyCanvas;

function showPreview(pixels) {
  const p = $("preview").getContext("2d");
  const img = p.createImageData(28, 28);
  for (let i = 0; i < 784; i++) {
    img.data.set([pixels[i], pixels[i], pixels[i], 255], 4 * i);
  }
  p.putImageData(img, 0, 0);
}

function drawBars(probs) {
  const bars = $("bars");
  bars.textContent = "";
  const top = probs ? probs.indexOf(Math.max(...probs)) : -1;
  for (let k = 0; k < 10; k++) {
    const p = probs ? probs[k] : 0;
    const row = document.createElement("div");
    row.style.display = "contents";
    row.className = k === top ? "top" : "";
    row.innerHTML = `<span class="label">${k}</span><span class="track"><span class="fill"></span></span>` +
      `<span class="pct">${probs ? (100 * p).toFixed(1) + "%" : ""}</span>`;
    row.querySelector(".fill").style.width = `${(100 * p).toFixed(1)}%`;
    bars.appendChild(row);
  }
}

demo.ready = main().then(() => true, (err) => {
  demo.error = String(err && err.stack ? err.stack : err);
  status("Failed: " + String(err), true);
  return false;
});
