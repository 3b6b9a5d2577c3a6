// explorer.js — the explorer page's UI (common/explorer/README.md): reads the sliders, calls the
// WebAssembly exports of explorer.c (the project's own C), draws what they return. It computes no
// number of its own: the bytes, the bubbles, the timelines and the ring's steps all come from C.
// Test mode (common/explorer/browser_test.py): index.html#test=<JSON> sets the sliders for each
// configuration in turn, reads the numbers back from the page and writes them into #zx-test-out.
"use strict";

var ZX = {};
var $ = function (id) { return document.getElementById(id); };
var SVGNS = "http://www.w3.org/2000/svg";

// ---- the sliders' values (what a flag may be; the C checks them) --------------------------------
var V = {
  psi: ["1M", "10M", "124M", "350M", "1.3B", "2.7B", "7B", "7.5B", "13B", "30B", "70B", "175B", "1T"],
  ranks: [1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
  stage: ["0", "1", "2", "3", "all"],
  k: [-1, 4, 8, 12, 16, 20],
  layers: [1, 2, 6, 12, 24, 32, 48, 64, 80, 96],
  hidden: [64, 256, 768, 1024, 2048, 4096, 5120, 8192, 12288],
  heads: [1, 2, 4, 12, 16, 32, 40, 64],
  seq: [128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768],
  micro: [1, 2, 4, 8, 16, 32, 64],
  tp: [1, 2, 4, 8, 16],
  vocab: [256, 32000, 50304, 128256],
  experts: [0, 4, 8, 16, 32, 64, 128],
  topk: [1, 2, 4, 8],
  moe: [1, 2, 4],
  ep: [1, 2, 4, 8, 16, 32, 64],
  pp: [1, 2, 4, 8, 16],
  cp: [1, 2, 4, 8, 16]
};
var KIND_COLOR = { params: "#457b9d", grads: "#e76f51", optim: "#2a9d8f", acts: "#e9c46a", states: "#6c757d" };
// dark enough for white 16 px labels (contrast >= 4.5:1); a stage's later chunks lighter, with black labels
var OP_COLOR = { F: "#1f5f99", B: "#2e7031", W: "#a64500" };
var OP_LIGHT = { F: "#9cc3e6", B: "#a8d5a2", W: "#f5b77a" };

function el(tag, attrs, parent, text) {
  var e = document.createElementNS(SVGNS, tag);
  for (var k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
function gb(x) { return (x / 1e9).toFixed(x >= 1e9 ? 1 : 3) + " GB"; }
function exact(x) { return Number.isInteger(x) ? x.toLocaleString("en-US") : String(x); }
// a number of ch00_memory's JSON for the table, by its key (the exact value stays in data-v and the title):
// bytes in GB, parameter counts in M or B, the saving as a factor, the owners' imbalance as a percentage
var BYTE_KEY = /^(acts|comm_bytes|states|device|grads|optim|total|host|slot_bytes|zero2_device|ours_|dense_states|expert_states|adamw_optim|owner_)/;
function count(x) { return x >= 1e9 ? fmt(x / 1e9, 2) + " B" : x >= 1e6 ? fmt(x / 1e6, 2) + " M" : exact(x); }
function pretty(key, x) {
  var k = key.split(".").pop();
  if (BYTE_KEY.test(k) || (/^stages\./.test(key) && k === "params"))
    return k.indexOf("owner_") === 0 ? count(x) : x < 1e6 ? exact(x) + " B" : gb(x); // GB as ch00_memory prints them
  if (/^(params|psi|muon_params|adamw_params|positions)/.test(k)) return count(x);
  if (k === "saving") return fmt(x, 1) + "× (" + fmt(100 / x, 1) + " % of DDP)"; // the printout's "vs DDP"
  if (k === "imbalance") return "+" + fmt(100 * (x - 1), 1) + " % over even";
  return exact(x);
}
// a slider's value: its typed box where it has one (m-layers-n: any number, the slider at the nearest notch)
function val(id) { var n = $(id + "-n"); return n ? +n.value : V[id.replace(/^m-/, "")][+$(id).value]; }
var TYPED = ["ranks", "layers", "hidden", "heads", "seq", "micro", "vocab", "experts", "topk"];
function notch(name, x) { // the slider's index nearest to x
  var best = 0;
  V[name].forEach(function (v, i) { if (Math.abs(v - x) < Math.abs(V[name][best] - x)) best = i; });
  return best;
}

// ---- real models one click away: their shapes as ch00_memory's flags (the numbers: ch00_memory's C) -----
// GPT-2 small: Hugging Face's gpt2 config (n_layer 12, n_embd 768, n_head 12, n_ctx 1024, vocab_size 50257).
// GPT-3 175B: Brown et al. 2020, Table 2.1 (n_layers 96, d_model 12288, n_heads 96, d_head 128, context
// 2048; GPT-2's tokenizer, 50257).
// DeepSeek-V3: its config.json (num_hidden_layers 61, hidden_size 7168, num_attention_heads 128, vocab_size
// 129280, n_routed_experts 256, num_experts_per_tok 8, n_shared_experts 1, moe_intermediate_size 2048;
// first_k_dense_replace 3, intermediate_size 18432) and Megatron-LM's deepseek_v3 recipe (moe_layer_freq
// [0]*3+[1]*58, moe_ffn_hidden_size 2048, 4096 tokens of sequence in pre-training).
// Llama-3 8B/70B/405B: Meta's config.json of meta-llama/Llama-3.1-8B, -70B, -405B (num_hidden_layers 32 / 80 /
// 126, hidden_size 4096 / 8192 / 16384, num_attention_heads 32 / 64 / 128, num_key_value_heads 8,
// intermediate_size 14336 / 28672 / 53248, vocab_size 128256, hidden_act silu, RoPE, RMSNorm, no biases,
// tie_word_embeddings false; pre-trained at 8192 tokens): ch00_memory's block flags (memcalc_shape.c) give
// their published counts to the parameter (8030261248, 70553706496, 405853388800; its unit test).
var LLAMA = "Meta's Llama 3 (config.json): grouped-query attention (8 kv heads), SwiGLU MLP, RoPE, RMSNorm, no " +
  "biases, untied head, 8192 tokens. Ψ is the published count to the parameter; the activations are " +
  "Korthikanti's stored tensors for this block (memcalc_shape.c), their dropout masks kept (Llama has none: " +
  "a·s²·b + 2·s·b·h a layer less).";
var PRESETS = {
  gpt2: { layers: 12, hidden: 768, heads: 12, seq: 1024, vocab: 50257, experts: 0, topk: 2, effn: 0, shared: 0, tied: true,
    note: "GPT-2 small: 12 layers, h 768, 12 heads, context 1024, vocabulary 50257, its head tied to the token " +
      "embedding: 124,439,808 parameters, GPT-2's own count." },
  gpt3: { layers: 96, hidden: 12288, heads: 96, seq: 2048, vocab: 50257, experts: 0, topk: 2, effn: 0, shared: 0, tied: true,
    note: "GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, h 12288, 96 heads of 128, context 2048, the head " +
      "tied: 174.6 B here (the paper rounds to 175.0 B)." },
  llama8: { layers: 32, hidden: 4096, heads: 32, seq: 8192, vocab: 128256, experts: 0, topk: 2, effn: 0, shared: 0,
    block: "llama", kv: 8, ffn: 14336, note: "Llama 3 8B: 32 layers, h 4096, 32 heads, F 14336. " + LLAMA },
  llama70: { layers: 80, hidden: 8192, heads: 64, seq: 8192, vocab: 128256, experts: 0, topk: 2, effn: 0, shared: 0,
    block: "llama", kv: 8, ffn: 28672, note: "Llama 3 70B: 80 layers, h 8192, 64 heads, F 28672. " + LLAMA },
  llama405: { layers: 126, hidden: 16384, heads: 128, seq: 8192, vocab: 128256, experts: 0, topk: 2, effn: 0, shared: 0,
    block: "llama", kv: 8, ffn: 53248, note: "Llama 3 405B: 126 layers, h 16384, 128 heads, F 53248. " + LLAMA },
  dsv3: { layers: 61, hidden: 7168, heads: 128, seq: 4096, vocab: 129280, experts: 256, topk: 8, effn: 2048, shared: 1,
    note: "DeepSeek-V3's experts on this GPT's block: 61 layers, h 7168, 128 heads, 256 routed experts of width " +
      "2048, 8 per token, 1 shared. 475 B here against its 671 B: its experts are SwiGLU (3 matrices, here 2), " +
      "its attention MLA, its first 3 layers dense MLPs of width 18432 (here every block MoE), and it adds a " +
      "multi-token-prediction module." }
};
function applyPreset() {
  var p = PRESETS[$("m-preset").value];
  $("m-preset-note").textContent = p ? p.note : "";
  if (!p) return;
  $("m-kind").value = "gpt";
  ["layers", "hidden", "heads", "seq", "vocab", "experts", "topk"].forEach(function (n) {
    $("m-" + n + "-n").value = p[n];
    $("m-" + n).value = notch(n, p[n]);
  });
  $("m-micro-n").value = 1, $("m-micro").value = 0;
  $("m-effn").value = p.effn, $("m-shared").value = p.shared;
  $("m-block").value = p.block || "gpt", $("m-tied").checked = !!p.tied; // the block's flags (memcalc_shape.c)
  $("m-kv").value = p.kv || 0, $("m-ffn").value = p.ffn || 0;
  ["m-tp", "m-pp", "m-cp", "m-moe", "m-ep"].forEach(function (id) { $(id).value = 0; }); // what each composes with
  $("m-offload").checked = false;
  updateMemory();
}

// ---- memory: ch00_memory's flags, run by its own C -------------------------------------------------
function memoryFlags() {
  var f = [];
  if ($("m-kind").value === "psi") f.push("--params " + val("m-psi"));
  else {
    f.push("--layers " + val("m-layers"), "--hidden " + val("m-hidden"), "--heads " + val("m-heads"),
      "--seq " + val("m-seq"), "--micro-batch " + val("m-micro"));
    if (val("m-tp") > 1) f.push("--tp " + val("m-tp"));
    if (ZX.grid && val("m-pp") > 1) f.push("--pp " + val("m-pp")); // chapters 07 and 10, where ch00_memory has them
    if (ZX.grid && val("m-cp") > 1) f.push("--cp " + val("m-cp"));
    f.push("--vocab " + val("m-vocab"));
    f = f.concat(blockFlags());
    if (ZX.moe && val("m-experts") > 0) // chapter 12's flags, where this ch00_memory has them (its --help says)
    {
      f.push("--experts " + val("m-experts"), "--topk " + val("m-topk"), "--moe-every " + val("m-moe"), "--ep " + val("m-ep"));
      if (ZX.fine && +$("m-effn").value > 0) f.push("--expert-ffn " + +$("m-effn").value); // issue 48's DeepSeekMoE
      if (ZX.fine && +$("m-shared").value > 0) f.push("--shared-experts " + +$("m-shared").value);
    }
  }
  f.push("--ranks " + val("m-ranks"), "--precision " + $("m-precision").value);
  if (ZX.muon && $("m-optimizer").value === "muon") f.push("--optimizer muon"); // issue 52: fp32 only (ch00 says so)
  if (val("m-stage") !== "all") f.push("--stage " + val("m-stage"));
  if (val("m-k") !== -1) f.push("--k " + val("m-k"));
  if ($("m-fp32grads").checked) f.push("--fp32-grads");
  if (ZX.grid && $("m-offload").checked) f.push("--offload"); // chapter 08
  return f.join(" ");
}

// the block's flags (memcalc_shape.c), where this ch00_memory has them: Llama's (GQA, SwiGLU, RoPE, no
// biases), its K and F typed (0: H and 4h); the head tied or not
function blockFlags() {
  var f = [];
  if (!ZX.block) return f;
  if ($("m-block").value === "llama") {
    if (+$("m-kv").value > 0) f.push("--kv-heads " + +$("m-kv").value);
    if (+$("m-ffn").value > 0) f.push("--ffn " + +$("m-ffn").value);
    f.push("--mlp swiglu", "--pos rope", "--no-bias");
  }
  if ($("m-tied").checked) f.push("--tied-head");
  return f;
}

function updateMemory() {
  ["psi", "stage", "k", "tp", "moe", "ep", "pp", "cp"].forEach(function (n) {
    var v = val("m-" + n);
    $("m-" + n + "-v").textContent = n === "k" && v === -1 ? "by precision (12 bf16, 8 fp32)" : String(v);
  });
  var gpt = $("m-kind").value === "gpt";
  ["layers", "hidden", "heads", "seq", "micro", "tp", "vocab", "experts", "topk", "moe", "ep", "pp", "cp"].forEach(function (n) {
    $("m-" + n).disabled = !gpt;
    if ($("m-" + n + "-n")) $("m-" + n + "-n").disabled = !gpt;
  });
  $("m-effn").disabled = $("m-shared").disabled = !gpt || !ZX.fine;
  $("m-block").disabled = $("m-tied").disabled = !gpt || !ZX.block;
  $("m-kv").disabled = $("m-ffn").disabled = !gpt || !ZX.block || $("m-block").value !== "llama";
  $("m-psi").disabled = gpt;
  hideUnused();
  if (gpt) $("m-psi-v").textContent = "from the shape (the GPT of common/model/gpt.h)";
  var flags = memoryFlags();
  $("m-cmd").textContent = "ch00_memory " + flags;
  Module.zxErr = [];
  var rc = Module.ccall("zx_memory", "number", ["string"], [flags]);
  ZX.memRc = rc;
  $("m-err").textContent = rc === 0 ? "" : Module.zxErr.join("\n") + " (exit " + rc + ")";
  $("m-text").textContent = Module.UTF8ToString(Module._zx_memory_text());
  var table = $("m-table"), chart = $("m-chart");
  clear(table);
  clear(chart);
  clear($("m-seqchart"));
  if (rc !== 0) return;
  var j = JSON.parse(Module.UTF8ToString(Module._zx_memory_json()));
  drawMemory(j, table, chart);
  if (gpt) drawSeq($("m-seqchart"));
  updateCompress(gpt);
}

// ---- chapter 13: bytes per rank per step by method (explorer.c's zx_compress: the programs' formulas) -----
// A row per method: its bytes per rank per step, across nodes (the mean over the ranks), and DDP's over it;
// each number's exact value in data-cv (data-ck names it), which make explorer-check compares with what
// ch13_compress and ch05_zero3 print (not data-v: the memory panel's numbers are ch00_memory's).
var COMPRESS = ["DDP", "PowerSGD:R", "1-bit Adam", "ZeRO-3", "qwZ", "qwZ + hpZ", "qgZ", "qwZ + hpZ + qgZ"];
var BUCKET_MB = 0.1; // --bucket-mb's default (common/train/loop_flags.c)
function compressArgs() {
  var N = val("m-ranks");
  return [val("m-layers"), val("m-heads"), val("m-hidden"), val("m-seq"), val("m-vocab"),
    $("m-precision").value === "fp32" ? 1 : 0, N, N / Math.max(1, +$("q-nodes").value), +$("q-rank").value,
    +$("q-block").value, BUCKET_MB, +$("q-warmup").value, +$("q-steps").value];
}
function cell(tag, attrs, parent, text) { // an HTML element (el makes SVG ones)
  var e = document.createElement(tag);
  for (var k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  parent.appendChild(e);
  return e;
}
function updateCompress(gpt) {
  var table = $("q-table");
  clear(table);
  $("q-err").textContent = "";
  if (!gpt) { $("q-err").textContent = "a transformer's shape, please: the formulas need its units"; return; }
  var a = compressArgs();
  if (!Number.isInteger(a[7])) { $("q-err").textContent = "nodes must divide N"; return; }
  Module.zxErr = [];
  var rc = Module.ccall("zx_compress", "number", ["number", "number", "number", "number", "number", "number",
    "number", "number", "number", "number", "number", "number", "number"], a);
  if (rc !== 0) { $("q-err").textContent = Module.zxErr.join("\n") + " (exit " + rc + ")"; return; }
  var head = cell("tr", {}, table);
  ["method", "bytes / rank / step", "across nodes (mean)", "DDP's over it"].forEach(function (h) { cell("th", {}, head, h); });
  var ddp = Module._zx_compress_bytes(0);
  COMPRESS.forEach(function (name, k) {
    var tr = cell("tr", {}, table), b = Module._zx_compress_bytes(k), x = Module._zx_compress_inter(k);
    cell("td", {}, tr, k === 1 ? "PowerSGD:" + a[8] : name);
    cell("td", { "data-ck": "bytes." + k, "data-cv": String(b), title: exact(b) }, tr, count(b) + " B");
    cell("td", { "data-ck": "inter." + k, "data-cv": String(x), title: exact(x) }, tr, count(x) + " B");
    cell("td", {}, tr, b > 0 ? (ddp / b).toFixed(2) + "x" : "");
  });
}

// ---- activations per layer vs sequence length (Korthikanti et al. 2022, Table 2's rows as s grows) -------
// ch00_memory at each s (the shape, its block, the micro-batch; one rank, DDP: the activations alone): its
// JSON's acts_per_layer, and acts_selective, the tp object's totals divided by L; full recompute as Table 2
// has it, the 2sbh checkpoint a layer (acts_recompute less the one layer recomputed at a time, / L). TP + SP at
// the slider's t, or 8 where the slider is at 1 (where t does not divide the shape: no TP lines). The points'
// exact JSON numbers and flags sit in data-sk, data-sv, data-sf (make explorer-check runs ch00_memory on them).
var SEQ_S = [512, 1024, 2048, 4096, 8192, 16384, 32768];
var SEQ_LINES = [["transformer.acts_per_layer", "no recompute", "#1f5f99", ""], ["transformer.acts_selective", "selective", "#2e7031", ""],
  ["transformer.acts_recompute", "full: 2sbh", "#a64500", ""], ["tp.acts_tp", "TP", "#6a1b9a", "6 4"],
  ["tp.acts_tp_sp", "TP + SP", "#1f5f99", "6 4"], ["tp.acts_tp_sp_selective", "TP + SP selective", "#2e7031", "6 4"],
  ["tp.acts_tp_sp_recompute", "TP + SP full: 2sbh/t", "#a64500", "6 4"]];
function seqFlags(s, t) {
  var f = ["--layers " + val("m-layers"), "--hidden " + val("m-hidden"), "--heads " + val("m-heads"), "--seq " + s,
    "--micro-batch " + val("m-micro")];
  if (t > 1) f.push("--tp " + t);
  f.push("--vocab " + val("m-vocab"));
  return f.concat(blockFlags(), ["--ranks 1", "--stage 0"]).join(" ");
}
function drawSeq(svg) {
  clear(svg);
  var t = val("m-tp") > 1 ? val("m-tp") : 8, L = val("m-layers"), pts = [];
  SEQ_S.forEach(function (s) {
    Module.zxErr = [];
    var flags = seqFlags(s, t), rc = Module.ccall("zx_memory", "number", ["string"], [flags]);
    if (rc !== 0) flags = seqFlags(s, 1), rc = Module.ccall("zx_memory", "number", ["string"], [flags]);
    if (rc === 0) pts.push({ s: s, flags: flags, j: JSON.parse(Module.UTF8ToString(Module._zx_memory_json())) });
  });
  var W = +svg.getAttribute("width"), H = +svg.getAttribute("height"), x0 = 90, x1 = W - 240, y0 = H - 40, y1 = 34;
  el("text", { x: 8, y: 20 }, svg, "a layer's activations vs s (Korthikanti et al., 16 bit, b = " + val("m-micro") +
    (pts.some(function (p) { return p.j.tp; }) ? ", t = " + t : "") + "): ch00_memory at each s");
  if (!pts.length) return;
  var get = function (p, key) { var k = key.split("."), o = p.j[k[0]]; return o ? o[k[1]] : undefined; };
  var per = function (key, v, p) { // a layer's bytes; full recompute: the checkpoint, not the layer recomputed
    if (key === "transformer.acts_recompute") return (v - p.j.transformer.acts_per_layer) / L;
    if (key === "tp.acts_tp_sp_recompute") return (v - p.j.tp.acts_tp_sp / L) / L;
    return key === "transformer.acts_per_layer" ? v : v / L;
  };
  var lo = Infinity, hi = 0;
  pts.forEach(function (p) { SEQ_LINES.forEach(function (l) { var v = get(p, l[0]); if (v > 0) { lo = Math.min(lo, per(l[0], v, p)); hi = Math.max(hi, per(l[0], v, p)); } }); });
  var e0 = Math.floor(Math.log10(lo)), e1 = Math.ceil(Math.log10(hi));
  if (e1 === e0) e1++;
  var X = function (s) { return x0 + (Math.log2(s) - 9) / (Math.log2(SEQ_S[SEQ_S.length - 1]) - 9) * (x1 - x0); };
  var Y = function (v) { return y0 - (Math.log10(v) - e0) / (e1 - e0) * (y0 - y1); };
  for (var e = e0; e <= e1; e++) { // powers of ten, in bytes
    el("line", { x1: x0, y1: Y(Math.pow(10, e)), x2: x1, y2: Y(Math.pow(10, e)), stroke: "#ccc" }, svg);
    el("text", { x: x0 - 8, y: Y(Math.pow(10, e)) + 5, "text-anchor": "end" }, svg,
      e >= 9 ? Math.pow(10, e - 9) + " GB" : e >= 6 ? Math.pow(10, e - 6) + " MB" : e >= 3 ? Math.pow(10, e - 3) + " kB" : Math.pow(10, e) + " B");
  }
  SEQ_S.forEach(function (s) {
    el("text", { x: X(s), y: y0 + 22, "text-anchor": "middle" }, svg, s >= 1024 ? s / 1024 + "K" : String(s));
  });
  var cur = val("m-seq");
  if (cur >= SEQ_S[0] && cur <= SEQ_S[SEQ_S.length - 1])
    el("line", { x1: X(cur), y1: y1, x2: X(cur), y2: y0, stroke: "#333", "stroke-dasharray": "2 3" }, svg);
  var row = 0;
  SEQ_LINES.forEach(function (l) {
    var d = "";
    pts.forEach(function (p) {
      var v = get(p, l[0]);
      if (!(v > 0)) return;
      d += (d ? " L" : "M") + X(p.s).toFixed(1) + "," + Y(per(l[0], v, p)).toFixed(1);
      el("circle", { cx: X(p.s), cy: Y(per(l[0], v, p)), r: 3, fill: l[2], "data-sk": l[0], "data-sv": String(v), "data-sf": p.flags }, svg);
    });
    if (!d) return;
    el("path", { d: d, fill: "none", stroke: l[2], "stroke-width": 2.5, "stroke-dasharray": l[3] }, svg);
    el("line", { x1: x1 + 14, y1: y1 + 6 + row * 24, x2: x1 + 44, y2: y1 + 6 + row * 24, stroke: l[2], "stroke-width": 2.5, "stroke-dasharray": l[3] }, svg);
    el("text", { x: x1 + 50, y: y1 + 11 + row * 24, fill: l[2] }, svg, l[1]);
    row++;
  });
}

function drawMemory(j, table, chart) {
  // every number of the JSON, as it comes: a field ch00_memory gains shows up here by itself
  var cols = Object.keys(j.stages[0]).filter(function (c) { return c !== "stage" && typeof j.stages[0][c] === "number"; });
  var tr = document.createElement("tr");
  tr.innerHTML = "<th>stage</th>" + cols.map(function (c) { return "<th>" + c + "</th>"; }).join("");
  table.appendChild(tr);
  j.stages.forEach(function (s) {
    var r = document.createElement("tr");
    r.innerHTML = "<th>" + (s.stage === 0 ? "DDP (0)" : "ZeRO-" + s.stage) + "</th>";
    cols.forEach(function (c) {
      var td = document.createElement("td");
      td.textContent = pretty("stages." + c, s[c]);
      td.title = exact(s[c]);
      td.setAttribute("data-k", "stages." + s.stage + "." + c);
      td.setAttribute("data-v", String(s[c]));
      r.appendChild(td);
    });
    table.appendChild(r);
  });
  // the other groups of numbers: transformer, tp, moe, pp, cp, offload; a list of objects (pp.per_stage)
  // by its index: pp.per_stage.0.acts
  var row = function (key, v) {
    var r = document.createElement("tr");
    r.innerHTML = "<th>" + key + "</th>";
    var td = document.createElement("td");
    td.colSpan = cols.length;
    td.style.textAlign = "left";
    td.textContent = pretty(key, v);
    td.title = exact(v);
    td.setAttribute("data-k", key);
    td.setAttribute("data-v", String(v));
    r.appendChild(td);
    table.appendChild(r);
  };
  Object.keys(j).forEach(function (obj) { // the top level's numbers (Ψ, N; Muon's owners) first
    if (typeof j[obj] === "number") row(obj, j[obj]);
  });
  Object.keys(j).forEach(function (obj) {
    if (obj === "stages" || typeof j[obj] !== "object" || j[obj] === null) return;
    Object.keys(j[obj]).forEach(function (k) {
      var v = j[obj][k];
      if (typeof v === "number") row(obj + "." + k, v);
      else if (Array.isArray(v)) v.forEach(function (e, i) {
        if (e && typeof e === "object") Object.keys(e).forEach(function (f) { if (typeof e[f] === "number") row(obj + "." + k + "." + i + "." + f, e[f]); });
      });
    });
  });
  // the chart: one stacked bar per stage (and TP, TP+SP), bytes per rank by kind
  // the activations drawn: all stored, selective recompute (= FlashAttention's), full recompute
  var mode = $("m-acts").value, rc = mode === "full", sel = mode === "selective";
  var tacts = function (t) { return t ? (rc ? t.acts_recompute : sel ? t.acts_selective : t.acts) : 0; };
  var muon = j.optimizer === "muon", bars = j.stages.map(function (s) {
    var b = { name: s.stage === 0 ? "DDP" : "ZeRO-" + s.stage, params: s.params, grads: s.grads, optim: s.optim, acts: 0 };
    b.acts = tacts(j.transformer);
    return b;
  });
  if (j.tp) {
    bars.push({ name: "TP t=" + j.tp.t, states: j.tp.states, acts: j.tp.acts_tp });
    bars.push({ name: "TP+SP", states: j.tp.states, acts: rc ? j.tp.acts_tp_sp_recompute : sel ? j.tp.acts_tp_sp_selective : j.tp.acts_tp_sp });
  }
  var last = j.stages[j.stages.length - 1], z = last.stage;
  if (j.pp) // each pipeline stage at the last ZeRO stage shown: its states, 1F1B's activations in flight (Korthikanti's)
    j.pp.per_stage.slice(0, 4).forEach(function (q) {
      bars.push({ name: "PP s" + q.pp_stage, states: q["states_z" + z], acts: q.acts_korthikanti });
    });
  if (j.cp) bars.push({ name: "CP C=" + j.cp.c, states: last.total, acts: rc ? j.cp.acts_korthikanti_recompute : j.cp.acts_korthikanti });
  if (j.offload) { // the device keeps params and grads; the host the optimizer states
    bars.push({ name: "offl. dev", params: j.offload.device_params, grads: j.offload.device_grads, optim: 0,
      acts: tacts(j.transformer) });
    bars.push({ name: "offl. host", params: 0, grads: 0, optim: j.offload.host, acts: 0 });
  }
  var max = 0;
  bars.forEach(function (b) { b.sum = (b.states !== undefined ? b.states : b.params + b.grads + b.optim) + b.acts; max = Math.max(max, b.sum); });
  var W = +chart.getAttribute("width"), H = +chart.getAttribute("height"), x0 = 70, y0 = H - 40, bw = Math.min(90, (W - x0 - 160) / bars.length - 14);
  var grouped = j.tp || j.pp || j.cp;
  if (muon) // issue 52: whole matrices on their owners, the largest owner's share sets the bytes per rank
  { // two lines: ZeRO-1 and -2 are ch03/ch04's --shard owner
    el("text", { x: 8, y: 18 }, chart, "bytes per rank (Muon, fp32, Ψ = " + count(j.psi) + ", N = " + j.ranks +
      "); ZeRO-1, ZeRO-2: whole matrices on owners");
    el("text", { x: 8, y: 40 }, chart, "the largest owner holds " + count(j.owner_max) + " matrix params, the smallest " +
      count(j.owner_min) + " (" + pretty("imbalance", j.imbalance) + ")");
  }
  else el("text", { x: 8, y: 18, "font-size": 15 }, chart, "bytes per rank (" + j.precision + ", Ψ = " + count(j.params) + ", N = " + j.world + ")" +
    (j.pp || j.cp ? "; PP, CP bars at " + (z === 0 ? "DDP" : "ZeRO-" + z) : ""));
  el("line", { x1: x0, y1: y0, x2: W - 150, y2: y0, stroke: "#333" }, chart);
  bars.forEach(function (b, i) {
    var x = x0 + 10 + i * (bw + 14), y = y0, parts = b.states !== undefined ? [["states", b.states], ["acts", b.acts]] :
      [["params", b.params], ["grads", b.grads], ["optim", b.optim], ["acts", b.acts]];
    parts.forEach(function (p) {
      var h = max > 0 ? p[1] / max * (y0 - (muon ? 66 : 40)) : 0;
      y -= h;
      el("rect", { x: x, y: y, width: bw, height: Math.max(h, 0), fill: KIND_COLOR[p[0]] }, chart);
    });
    el("text", { x: x + bw / 2, y: y - 6, "text-anchor": "middle", "font-size": 14 }, chart, gb(b.sum));
    el("text", { x: x + bw / 2, y: y0 + 20, "text-anchor": "middle", "font-size": 15 }, chart, b.name);
  });
  (grouped ? ["params", "grads", "optim", "acts", "states"] : ["params", "grads", "optim", "acts"]).forEach(function (k, i) {
    el("rect", { x: W - 140, y: 40 + i * 26, width: 18, height: 18, fill: KIND_COLOR[k] }, chart);
    el("text", { x: W - 115, y: 54 + i * 26, "font-size": 15 }, chart, k === "optim" ? "optimizer (K)" : k === "acts" ? (rc ? "acts (recompute)" : sel ? "acts (selective)" : "activations") :
      k === "states" ? (j.tp ? "states / t (TP)" : "model states") : k);
  });
}

// ---- schedules: the simulator of solutions/pipeline_sim.c -----------------------------------------
var SCHED_NAME = ["naive", "GPipe", "1F1B", "interleaved", "ZB-H1", "ZB-H2", "DualPipeV"];
var SCHED_FORMULA = ["(P−1)/P", "(P−1)/(M+P−1)", "(P−1)/(M+P−1)", "(P−1)/(v·M+P−1)",
  "(P−1)(F+B−W) / ((P−1)(F+B−W) + M(F+B+W))", "(P−1)(F+B−2W) / (… + M(F+B+W)), ≥ 0", "—"];
var COMPARE = [1, 2, 3, 4, 5, 6];
var CLOCK_X0 = 110, CLOCK_RIGHT = 400; // the timeline's and the bars' clock: the same left edge and scale // the schedules drawn on the shared clock (naive too when chosen)
function sched() {
  return { sched: +$("s-sched").value, P: +$("s-P").value, M: +$("s-M").value, v: +$("s-v").value,
    f: +$("s-f").value / 10, b: +$("s-b").value / 10, w: +$("s-w").value / 10, c: +$("s-c").value / 10 };
}
function runSched(q, M, which) {
  return Module._zx_sched(which === undefined ? q.sched : which, q.P, M === undefined ? q.M : M, q.v, q.f, q.b, q.w, q.c);
}
function chunks(sc, v) { return sc === 3 ? v : sc === 6 ? 2 : 1; }
function fmt(x, d) { return x.toLocaleString("en-US", { maximumFractionDigits: d === undefined ? 2 : d }); }
function pct(x) { return (100 * x).toFixed(1) + " %"; }

// every schedule at these P, M, F, B, W, c: its step, own window, bubble and activations in flight per stage
function compareAll(q) {
  var rows = [];
  COMPARE.concat(q.sched === 0 ? [0] : []).forEach(function (sc) {
    var r = { sched: sc, ok: runSched(q, q.M, sc) === 0 };
    if (r.ok) {
      r.step = Module._zx_sched_makespan(); r.span = Module._zx_sched_span(); r.bubble = Module._zx_sched_bubble();
      r.inflight = [];
      for (var s = 0; s < q.P; s++) r.inflight.push(Module._zx_inflight(sc, q.P, s, q.M, q.v) / chunks(sc, q.v));
    }
    rows.push(r);
  });
  return rows;
}

function axis(svg, x0, sx, T, y, H) { // time ticks under (and faint lines through) a drawing
  var step = Math.pow(10, Math.floor(Math.log10(T / 4))), n = T / step;
  if (n > 10) step *= n > 20 ? 5 : 2;
  el("line", { x1: x0, y1: y, x2: x0 + T * sx, y2: y, stroke: "#333" }, svg);
  for (var t = 0; t <= T + 1e-9; t += step) {
    el("line", { x1: x0 + t * sx, y1: y - H, x2: x0 + t * sx, y2: y + 5, stroke: "#bbb", "stroke-width": 1 }, svg);
    el("text", { x: x0 + t * sx, y: y + 22, "text-anchor": "middle", "font-size": 16 }, svg, fmt(t, 1));
  }
}

function updateSchedules() {
  var q = sched();
  ["P", "M", "v"].forEach(function (n) { $("s-" + n + "-v").textContent = q[n]; });
  ["f", "b", "w", "c"].forEach(function (n) { $("s-" + n + "-v").textContent = q[n].toFixed(1); });
  $("s-v").disabled = q.sched !== 3;
  hideUnused();
  drawCurve(q); // it reruns the simulator for every M; the comparison for every schedule; this one last
  var rows = compareAll(q), T = 0;
  rows.forEach(function (r) { if (r.ok) T = Math.max(T, r.step); });
  var rc = runSched(q);
  ZX.schedRc = rc;
  var tl = $("s-timeline");
  clear(tl);
  $("s-formula-text").textContent = SCHED_FORMULA[q.sched];
  if (rc !== 0) {
    $("s-err").textContent = "the simulator refuses this case (interleaved needs M a multiple of P; DualPipeV M ≥ 2P)";
    ["s-bubble", "s-closed", "s-makespan", "s-busy", "s-span"].forEach(function (id) { $(id).textContent = "–"; $(id).removeAttribute("data-v"); });
    drawCompare(q, rows, T);
    return;
  }
  $("s-err").textContent = "";
  var bub = Module._zx_sched_bubble(), closed = Module._zx_bubble_closed(q.sched, q.P, q.M, q.v, q.f, q.b, q.w, q.c);
  var mk = Module._zx_sched_makespan(), span = Module._zx_sched_span(), busy = Module._zx_sched_busy();
  $("s-bubble").textContent = pct(bub);
  $("s-bubble").setAttribute("data-v", String(bub));
  $("s-closed").textContent = closed < 0 ? "outside its range (it holds for " + Module.ccall("zx_bubble_closed_range", "string", ["number"], [q.sched]) + ")" : pct(closed);
  $("s-closed").setAttribute("data-v", String(closed));
  $("s-makespan").textContent = fmt(mk);
  $("s-span").textContent = fmt(span);
  $("s-busy").textContent = fmt(busy);
  $("s-h2").style.display = q.sched === 5 ? "" : "none";
  $("s-h2-mk").textContent = pct(Module._zx_sched_bubble_makespan());
  var W = +tl.getAttribute("width"), rowH = Math.max(12, Math.min(34, 200 / q.P)), x0 = CLOCK_X0;
  tl.setAttribute("height", q.P * rowH + 40);
  var sx = (W - x0 - CLOCK_RIGHT) / T; // the shared clock: the longest step among the schedules compared
  var mine = rows.filter(function (r) { return r.sched === q.sched; })[0];
  axis(tl, x0, sx, T, q.P * rowH + 10, q.P * rowH);
  for (var s = 0; s < q.P; s++) {
    var y = 6 + s * rowH;
    el("text", { x: 4, y: y + rowH * 0.7, "font-size": 16 }, tl, "stage " + s);
    if (mine && rowH >= 18) el("text", { x: x0 + T * sx + 10, y: y + rowH * 0.7, "font-size": 16 }, tl, "holds " + fmt(mine.inflight[s], 1));
    var n = Module._zx_sched_nops(s);
    for (var i = 0; i < n; i++) {
      var k = String.fromCharCode(Module._zx_sched_kind(s, i)), t0 = Module._zx_sched_start(s, i), d = Module._zx_sched_dur(s, i);
      var chunk = Module._zx_sched_chunk(s, i);
      el("rect", { x: x0 + t0 * sx, y: y, width: Math.max(d * sx - 1, 1), height: rowH - 3, fill: chunk > 0 ? OP_LIGHT[k] : OP_COLOR[k], stroke: "#fff" }, tl);
      if (d * sx > 30 && rowH >= 22)
        el("text", { x: x0 + (t0 + d / 2) * sx, y: y + rowH * 0.68, "text-anchor": "middle", "font-size": 16, fill: chunk > 0 ? "#000" : "#fff" }, tl, k + Module._zx_sched_micro(s, i));
    }
  }
  drawCompare(q, rows, T);
}

// one bar per schedule on the same clock as the timeline: its step, and what each stage holds
function drawCompare(q, rows, T) {
  var svg = $("s-compare");
  clear(svg);
  var W = +svg.getAttribute("width"), x0 = CLOCK_X0, rowH = 30, sx = (W - x0 - CLOCK_RIGHT) / (T || 1);
  svg.setAttribute("height", rows.length * rowH + 44);
  el("text", { x: x0 + T * sx + 10, y: 16, "font-size": 16, "font-weight": "bold" }, svg, "bubble · activations in flight per stage");
  rows.forEach(function (r, i) {
    var y = 24 + i * rowH;
    el("text", { x: 4, y: y + 20, "font-size": 16, "font-weight": r.sched === q.sched ? "bold" : "normal" }, svg, SCHED_NAME[r.sched]);
    if (!r.ok) { el("text", { x: x0, y: y + 20, "font-size": 16 }, svg, "does not run here (interleaved: M a multiple of P; DualPipeV: M ≥ 2P)"); return; }
    var bar = el("rect", { x: x0, y: y + 3, width: r.step * sx, height: rowH - 8, fill: r.sched === q.sched ? "#1d3557" : "#6c7a89" }, svg);
    bar.setAttribute("data-bar", SCHED_NAME[r.sched]);
    bar.setAttribute("data-step", String(r.step));
    el("text", { x: x0 + T * sx + 10, y: y + 20, "font-size": 16 }, svg, "step " + fmt(r.step) + " · " + pct(r.bubble) +
      " · [" + r.inflight.map(function (a) { return fmt(a, 1); }).join(", ") + "]");
  });
  axis(svg, x0, sx, T, rows.length * rowH + 24, rows.length * rowH);
}

function drawCurve(q) {
  var svg = $("s-curve");
  clear(svg);
  var W = +svg.getAttribute("width"), H = +svg.getAttribute("height"), x0 = 50, y0 = H - 40, Mmax = 32;
  var sx = function (M) { return x0 + (M - 1) / (Mmax - 1) * (W - x0 - 20); }, sy = function (b) { return y0 - b * (y0 - 20); };
  el("line", { x1: x0, y1: y0, x2: W - 10, y2: y0, stroke: "#333" }, svg);
  el("line", { x1: x0, y1: y0, x2: x0, y2: 15, stroke: "#333" }, svg);
  [0, 0.25, 0.5, 0.75, 1].forEach(function (b) { el("text", { x: 8, y: sy(b) + 5, "font-size": 13 }, svg, b.toFixed(2)); });
  [1, 8, 16, 24, 32].forEach(function (M) { el("text", { x: sx(M), y: y0 + 18, "font-size": 13, "text-anchor": "middle" }, svg, "M=" + M); });
  var pts = [];
  for (var M = 1; M <= Mmax; M++) if (runSched(q, M) === 0) pts.push(sx(M) + "," + sy(Module._zx_sched_bubble()));
  el("polyline", { points: pts.join(" "), fill: "none", stroke: "#1d3557", "stroke-width": 2 }, svg);
  el("text", { x: x0 + 10, y: 16, "font-size": 14 }, svg, "bubble vs M: simulator (line), " + SCHED_NAME[q.sched] + ", P = " + q.P + ", these F, B, W");
  var meas = (typeof ZX_MEASURED === "undefined" ? [] : ZX_MEASURED).filter(function (p) {
    return p.sched === q.sched && p.P === q.P && (q.sched !== 3 || p.v === q.v) && p.M <= Mmax;
  });
  var files = {};
  meas.forEach(function (p) {
    var c = el("circle", { cx: sx(p.M), cy: sy(p.bubble), r: 6, fill: p.model === "gpt" ? "#e63946" : "#8d5fd3", "fill-opacity": 0.8 }, svg);
    el("title", {}, c, "measured: " + p.case + " " + p.bubble.toFixed(3) + " (" + p.file + ", " + p.date + ")");
    el("text", { x: sx(p.M) + 8, y: sy(p.bubble) - 6, "font-size": 12 }, svg, "measured " + p.model);
    files[p.file + " (" + p.date + ", " + p.machine + ")"] = 1;
  });
  $("s-measured-note").textContent = meas.length ? "dots: measured on this project's machine by make bench-pipeline (" + meas.length +
    " runs, the real program with its messages and its stages' unequal costs): " + Object.keys(files).join("; ") +
    ". The line is the simulator with the sliders' F, B, W and no message cost unless c > 0." :
    "no measured run of this schedule at P = " + q.P + " in notes/data (measured: P = 2 and 4, GPipe, 1F1B, interleaved v = 2, ZB-H1, ZB-H2).";
}

// ---- collectives: solutions/ring.c and alltoall.c on N simulated ranks -----------------------------
var COLL = [ // name, ch01_collectives --op, the bytes per rank in all (the ring model), per step
  ["reduce-scatter", "reduce_scatter", "(N−1)/N·n·4 B", "(n/N)·4 B"],
  ["all-gather", "all_gather", "(N−1)/N·n·4 B", "(n/N)·4 B"],
  ["all-reduce = reduce-scatter, then all-gather", "reduce_scatter", "2(N−1)/N·n·4 B", "(n/N)·4 B"],
  ["broadcast from rank 0 (a chain)", "broadcast", "n·4 B from every rank but the chain's last", "n·4 B"],
  ["reduce to rank 0 (a chain)", "reduce", "n·4 B from every rank but the root", "n·4 B"],
  ["all-to-all (pairwise)", "all_to_all", "(N−1)/N·n·4 B: every block but its own, one hop", "(n/N)·4 B"]];
function pieceName(op, N, n, lo, len) {
  if (lo < 0) return "";
  if (lo === 0 && len === n) return "all";
  return (op === 5 ? "from rank " : "chunk ") + Math.round(lo / (n / N));
}
function updateCollectives() {
  var op = +$("c-op").value, N = +$("c-N").value, per = +$("c-per").value;
  $("c-per").disabled = op === 3 || op === 4;
  hideUnused();
  var steps = Module._zx_ring(op, N, per), n = Module._zx_ring_numel();
  $("c-step").max = steps;
  if (+$("c-step").value > steps) $("c-step").value = steps;
  var step = +$("c-step").value;
  $("c-N-v").textContent = N;
  $("c-per-v").textContent = per;
  var phase = op !== 2 || step === 0 ? "" : step <= N - 1 ? " (reduce-scatter)" : " (all-gather, from the reduce-scatter's output)";
  $("c-step-v").textContent = step + " of " + steps + phase;
  var list = function (k, f) { var a = []; for (var i = 0; i < k; i++) a.push(fmt(f(i), 0)); return "[" + a.join(", ") + "]"; };
  var table = $("c-table");
  clear(table);
  var head = document.createElement("tr");
  var showIn = step === 0 || N <= 4; // at N > 4 the inputs only at step 0: the table stays inside the view
  head.innerHTML = "<th>rank</th>" + (showIn ? "<th>input</th>" : "") + (step > 0 ? "<th>step " + step + ": sends</th><th>then holds</th>" : "") +
    (step === steps ? "<th>output</th>" : "") + "<th>sent in all</th>";
  table.appendChild(head);
  var cell = function (tr, text, k, v) {
    var td = document.createElement("td");
    td.textContent = text;
    if (k) { td.setAttribute("data-k", k); td.setAttribute("data-v", v); }
    tr.appendChild(td);
  };
  for (var r = 0; r < N; r++) {
    var tr = document.createElement("tr"), inp = [], m = Module._zx_ring_in_numel();
    for (var i = 0; i < m; i++) inp.push((i > 0 && m === n && op !== 3 && op !== 4 && i % per === 0 ? "| " : "") + fmt(Module._zx_ring_in(r, i), 0));
    tr.innerHTML = "<th>" + r + "</th>";
    if (showIn) cell(tr, "[" + inp.join(", ").replace(/, \| /g, " | ") + "]");
    if (step > 0) {
      var k = Module._zx_ring_sent(r, step - 1), to = Module._zx_ring_sent_to(r, step - 1);
      cell(tr, k ? "to " + to + ": " + list(k, function (i) { return Module._zx_ring_sent_value(r, step - 1, i); }) : "–");
      var lo = Module._zx_ring_piece(r, step - 1), len = Module._zx_ring_piece_numel(r, step - 1), after = [];
      for (var i3 = 0; lo >= 0 && i3 < len; i3++) after.push(Module._zx_ring_after(r, step - 1, i3));
      cell(tr, lo >= 0 ? pieceName(op, N, n, lo, len) + ": " + list(len, function (i) { return after[i]; }) : "–",
        "after." + r, lo >= 0 ? JSON.stringify({ lo: lo, v: after }) : "null");
    }
    if (step === steps) {
      var out = [];
      for (var i2 = 0; i2 < Module._zx_ring_out_numel(r); i2++) out.push(Module._zx_ring_out(r, i2));
      cell(tr, out.length ? list(out.length, function (i) { return out[i]; }) : "(nothing: only the root receives)", "out." + r, JSON.stringify(out));
    }
    var total = 0;
    for (var s2 = 0; s2 < steps; s2++) total += Module._zx_ring_sent(r, s2) * 4;
    var model = Module._zx_ring_model_bytes(op, N, n, 4, r);
    cell(tr, total + " B" + (N <= 4 ? " (model " + model + ")" : total === model ? " = model" : " ≠ model " + model), "sent." + r, String(total));
    table.appendChild(tr);
  }
  // the ring: this step's messages, r -> where each goes, with what they carry (values while they fit)
  var svg = $("c-ring");
  clear(svg);
  var cx = 250, cy = 245, R = N > 4 ? 185 : 160;
  var pos = function (r) { var a = -Math.PI / 2 + 2 * Math.PI * r / N; return [cx + R * Math.cos(a), cy + R * Math.sin(a)]; };
  el("defs", {}, svg).innerHTML = '<marker id="arr" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="8" markerHeight="8" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#c1121f"/></marker>';
  var bytes = 0, labels = N <= 4 && (op === 3 || op === 4 || per <= 2);
  for (var r2 = 0; r2 < N; r2++) {
    var a = pos(r2), sent = step > 0 ? Module._zx_ring_sent(r2, step - 1) : 0;
    if (r2 === 0) bytes = sent * 4;
    if (sent > 0) {
      var b = pos(Module._zx_ring_sent_to(r2, step - 1)), dx = b[0] - a[0], dy = b[1] - a[1], L = Math.hypot(dx, dy), ux = dx / L, uy = dy / L;
      el("line", { x1: a[0] + ux * 34, y1: a[1] + uy * 34, x2: b[0] - ux * 34, y2: b[1] - uy * 34, stroke: "#c1121f", "stroke-width": 3, "marker-end": "url(#arr)" }, svg);
      var at = L > 2 * R * 0.8 ? 0.3 : 0.5; // a chord (the all-to-all): its label near its sender, off the centre
      el("text", { x: a[0] + dx * at - uy * 22, y: a[1] + dy * at + ux * 22 + 5, "text-anchor": "middle" }, svg,
        labels ? list(sent, function (i) { return Module._zx_ring_sent_value(r2, step - 1, i); }) : sent * 4 + " B");
    }
    el("circle", { cx: a[0], cy: a[1], r: 30, fill: "#1d3557" }, svg);
    el("text", { x: a[0], y: a[1] + 6, "text-anchor": "middle", fill: "#fff", "font-size": 18 }, svg, "rank " + r2);
  }
  el("text", { x: 10, y: 20 }, svg, COLL[op][0].replace(/ =.*/, "") + ", N = " + N + ", n = " + n +
    (step > 0 ? ": step " + step + "'s messages" : ": the inputs"));
  $("c-cmd").textContent = 'make run CH=01 NP=' + N + ' ARGS="--op ' + COLL[op][1] + ' --impl ring"' +
    (op === 2 ? " (what this all-reduce holds at step " + (N - 1) + "; chapter 01's --op all_reduce starts from other inputs)" : "");
  $("c-step-bytes").textContent = step > 0 ? bytes + " B" : "–";
  $("c-step-bytes").setAttribute("data-v", step > 0 ? String(bytes) : "");
  $("c-step-formula-text").textContent = COLL[op][3];
  $("c-step-formula").textContent = (op === 3 || op === 4 ? n * 4 : Module._zx_ring_formula_step(N, n, 4)) + " B";
  $("c-total-formula-text").textContent = COLL[op][2];
  var total0 = 0;
  for (var s3 = 0; s3 < steps; s3++) total0 += Module._zx_ring_sent(0, s3) * 4;
  $("c-total-bytes").textContent = "rank 0: " + total0 + " B";
  $("c-total-bytes").setAttribute("data-v", String(total0));
  $("c-total-formula").textContent = Module._zx_ring_model_bytes(op, N, n, 4, 0) + " B";
}

// the controls a case does not use take no room (a projector's first view holds the picture)
function hideUnused() {
  document.querySelectorAll(".controls label").forEach(function (l) {
    var i = l.querySelector("input, select");
    l.classList.toggle("off", !!(i && i.disabled));
  });
}

// ---- the layout, measured from the DOM (make explorer-check at 1280x720) -----------------------------
function rgb(c) { var m = c.match(/[\d.]+/g); return m ? m.slice(0, 3).map(Number) : [255, 255, 255]; }
function lum(c) {
  var v = rgb(c).map(function (x) { x /= 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); });
  return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2];
}
function contrast(a, b) { var x = lum(a), y = lum(b); return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); }
function background(e) {
  for (; e && e.nodeType === 1; e = e.parentElement) {
    var b = getComputedStyle(e).backgroundColor;
    if (b && b !== "transparent" && !/rgba\(.*, 0\)$/.test(b)) return b;
  }
  return "rgb(255, 255, 255)";
}
var MAIN_PICTURE = { memory: "m-chart", schedules: "s-timeline", collectives: "c-ring" };
function measureLayout(panel) {
  var r = $(MAIN_PICTURE[panel]).getBoundingClientRect(), out = { panel: panel, vw: innerWidth, vh: innerHeight,
    pic: { left: r.left, top: r.top, right: r.right, bottom: r.bottom }, minFont: 99, minFontAt: "", minContrast: 99, minContrastAt: "" };
  var visible = function (e) { var b = e.getBoundingClientRect(); return b.width > 0 && b.height > 0 && e.closest("details:not([open])") === null; };
  document.querySelectorAll("header, #" + panel + " *").forEach(function (e) {
    var own = Array.prototype.some.call(e.childNodes, function (n) { return n.nodeType === 3 && n.textContent.trim(); });
    if (!own || !visible(e)) return;
    var cs = getComputedStyle(e), f = parseFloat(cs.fontSize), fg, bg;
    if (e instanceof SVGElement) {
      fg = cs.fill; // an SVG label: on the rect drawn just before it when it sits inside one, else the page
      var prev = e.previousElementSibling, pb = prev && (prev.tagName === "rect" || prev.tagName === "circle") ? prev.getBoundingClientRect() : null, tb = e.getBoundingClientRect();
      bg = pb && tb.left >= pb.left - 1 && tb.right <= pb.right + 1 && tb.top >= pb.top - 1 && tb.bottom <= pb.bottom + 1 ? getComputedStyle(prev).fill : background(e.ownerSVGElement);
    } else { fg = cs.color; bg = background(e); }
    var k = contrast(fg, bg), what = (e.id || e.tagName) + " '" + e.textContent.trim().slice(0, 30) + "'";
    if (f < out.minFont) { out.minFont = f; out.minFontAt = what; }
    if (k < out.minContrast) { out.minContrast = k; out.minContrastAt = what + " " + fg + " on " + bg; }
  });
  return out;
}

// ---- panels, and the test mode ------------------------------------------------------------------
function show(panel) {
  document.querySelectorAll("section").forEach(function (s) { s.classList.toggle("on", s.id === panel); });
  document.querySelectorAll("nav button").forEach(function (b) { b.classList.toggle("on", b.getAttribute("data-panel") === panel); });
}

function setControls(cfg) {
  for (var id in cfg) {
    var e = $(id);
    if (e.type === "checkbox") e.checked = !!cfg[id];
    else e.value = cfg[id];
    e.dispatchEvent(new Event(e.tagName === "SELECT" || e.type === "checkbox" ? "change" : "input"));
  }
}
function readNumbers(section) {
  var out = {};
  document.querySelectorAll("#" + section + " [data-v]").forEach(function (e) {
    out[e.getAttribute("data-k") || e.id] = e.getAttribute("data-v");
  });
  return out;
}

function runTests(t) {
  var res = { memory: [], schedules: [], collectives: [] };
  (t.memory || []).forEach(function (cfg) {
    show("memory");
    setControls(cfg);
    var seq = []; // the chart vs s: each point's flags, JSON key and exact value
    document.querySelectorAll("#m-seqchart [data-sk]").forEach(function (c) {
      seq.push({ flags: c.getAttribute("data-sf"), key: c.getAttribute("data-sk"), v: c.getAttribute("data-sv") });
    });
    res.memory.push({ cfg: cfg, flags: memoryFlags(), rc: ZX.memRc, err: $("m-err").textContent, text: $("m-text").textContent, numbers: readNumbers("memory"), seq: seq });
  });
  res.compress = (t.compress || []).map(function (cfg) { // chapter 13's table: its args and exact numbers
    show("memory");
    setControls(cfg);
    var nums = {};
    document.querySelectorAll("#q-table [data-cv]").forEach(function (e) { nums[e.getAttribute("data-ck")] = +e.getAttribute("data-cv"); });
    return { cfg: cfg, args: compressArgs(), err: $("q-err").textContent, numbers: nums };
  });
  (t.schedules || []).forEach(function (cfg) {
    show("schedules");
    setControls(cfg);
    var q = sched();
    var bars = {};
    document.querySelectorAll("#s-compare [data-bar]").forEach(function (b) {
      bars[b.getAttribute("data-bar")] = { width: b.getBoundingClientRect().width, step: +b.getAttribute("data-step") };
    });
    res.schedules.push({ cfg: cfg, q: q, rc: ZX.schedRc, bubble: $("s-bubble").getAttribute("data-v"), closed: $("s-closed").getAttribute("data-v"),
      ops0: Module._zx_sched_nops(0), bars: bars });
  });
  (t.collectives || []).forEach(function (cfg) {
    show("collectives");
    setControls(cfg);
    res.collectives.push({ cfg: cfg, numbers: readNumbers("collectives") });
  });
  res.layout = (t.layout || []).map(function (p) { show(p.panel); setControls(p.cfg || {}); return measureLayout(p.panel); });
  $("zx-test-out").textContent = JSON.stringify(res);
}

function start() {
  // the sliders of chapter 12's Mixture of Experts, where this ch00_memory has its flags
  Module.zxOut = [];
  Module.ccall("zx_memory", "number", ["string"], ["--help"]);
  ZX.moe = Module.zxOut.join("\n").indexOf("--experts") >= 0;
  document.querySelectorAll("label.moe").forEach(function (l) { l.style.display = ZX.moe ? "" : "none"; });
  // chapters 07, 10 and 08's sliders (--pp, --cp, --offload), likewise
  ZX.grid = Module.zxOut.join("\n").indexOf("--pp") >= 0;
  document.querySelectorAll("label.grid").forEach(function (l) { l.style.display = ZX.grid ? "" : "none"; });
  // issue 52's Muon (--optimizer muon), likewise; choosing it picks fp32, the only precision it has
  ZX.muon = Module.zxOut.join("\n").indexOf("--optimizer") >= 0;
  document.querySelectorAll("label.muon").forEach(function (l) { l.style.display = ZX.muon ? "" : "none"; });
  $("m-optimizer").addEventListener("change", function () { if ($("m-optimizer").value === "muon") $("m-precision").value = "fp32"; });
  document.querySelectorAll("nav button").forEach(function (b) {
    b.addEventListener("click", function () { show(b.getAttribute("data-panel")); location.hash = b.getAttribute("data-panel"); });
  });
  // the typed boxes and their sliders move together (first, so that updateMemory reads them moved)
  TYPED.forEach(function (n) {
    var r = $("m-" + n), box = $("m-" + n + "-n");
    box.value = V[n][+r.value];
    var fromSlider = function () { box.value = V[n][+r.value]; };
    r.addEventListener("input", fromSlider);
    r.addEventListener("change", fromSlider);
    box.addEventListener("input", function () { if (box.value !== "") r.value = notch(n, +box.value); });
  });
  ZX.fine = Module.zxOut.join("\n").indexOf("--expert-ffn") >= 0; // issue 48's fine-grained and shared experts
  ZX.block = Module.zxOut.join("\n").indexOf("--kv-heads") >= 0; // a real model's block (memcalc_shape.c)
  $("m-preset").addEventListener("change", applyPreset);
  document.querySelectorAll("#memory input, #memory select").forEach(function (e) {
    if (e.id === "m-preset") return;
    e.addEventListener("input", updateMemory);
    e.addEventListener("change", updateMemory);
  });
  document.querySelectorAll("#schedules input, #schedules select").forEach(function (e) { e.addEventListener("input", updateSchedules); e.addEventListener("change", updateSchedules); });
  document.querySelectorAll("#collectives input, #collectives select").forEach(function (e) { e.addEventListener("input", updateCollectives); e.addEventListener("change", updateCollectives); });
  updateMemory();
  updateSchedules();
  updateCollectives();
  $("zx-status").textContent = "every number: the project's C, compiled to WebAssembly";
  var h = location.hash.slice(1);
  try { h = decodeURIComponent(h); } catch (e) { /* a cut link: read as it is */ }
  if (h.indexOf("test=") === 0) runTests(JSON.parse(h.slice(5)));
  else if (h.indexOf("panel=") === 0) openLink(h.slice(6));
  else show(PANELS.indexOf(h) >= 0 ? h : "memory");
}

// #panel={"panel":"schedules","cfg":{"s-sched":4,...}}: a panel with its controls set (links in slides).
// A link that does not parse, names no panel or an unknown control: the default panel (or the rest of the
// link) and one line saying what was left out.
var PANELS = ["memory", "schedules", "collectives"];
function openLink(text) {
  var p = null, skipped = [];
  try { p = JSON.parse(text); } catch (e) { p = null; }
  if (!p || typeof p !== "object" || PANELS.indexOf(p.panel) < 0) {
    show("memory");
    $("zx-notice").textContent = "this link's #panel= could not be read (" + text.slice(0, 40) + "…): the default panel instead";
    return;
  }
  show(p.panel);
  var cfg = {};
  for (var id in (p.cfg || {})) { if ($(id)) cfg[id] = p.cfg[id]; else skipped.push(id); }
  setControls(cfg);
  if (skipped.length) $("zx-notice").textContent = "this link's controls " + skipped.join(", ") + " do not exist: left out";
}
if (Module.calledRun) start();
else Module.onRuntimeInitialized = start;
