// shared by the static report (report.html) and the viewer (crates/view)
function fmt(b) {
  if (b <= 1024) return b + " bytes";
  if (b <= 1048576) return (b / 1024).toFixed(2) + " KiB";
  if (b <= 1073741824) return (b / 1048576).toFixed(2) + " MiB";
  return (b / 1073741824).toFixed(2) + " GiB";
}
function esc(s) { return String(s).replace(/[&<>"]/g, function (c) { return {"&":"&amp;","<":"&lt;",">":"&gt;","\"":"&quot;"}[c]; }); }
// one colour per category (the legend's), a lighter or darker shade every
// other band so that neighbours stay apart
var PALETTE = {
  parameters: [212, 45, 48], gradients: [28, 85, 55], optimizer_state: [358, 70, 60],
  optimizer_temporary: [350, 80, 78], activations: [110, 40, 48], backward_temporary: [45, 80, 58],
  cublas_workspace: [300, 25, 58], other: [25, 25, 50]
};
function catColour(c, k) {
  var p = PALETTE[c] || PALETTE.other, l = p[2] + (k % 2 ? 8 : 0);
  return "hsl(" + p[0] + "," + p[1] + "%," + l + "%)";
}
// band b as a closed path: its offsets p stack it on those below it
function bandPath(ctx, b, X, Y) {
  var p = b.p, j;
  ctx.beginPath();
  for (j = 0; j < p.length; j++) {
    var x0 = X(p[j][0]), x1 = X(j + 1 < p.length ? p[j + 1][0] : b.e);
    if (j === 0) ctx.moveTo(x0, Y(p[j][1] + b.sz));
    ctx.lineTo(x0, Y(p[j][1] + b.sz)); ctx.lineTo(x1, Y(p[j][1] + b.sz));
  }
  for (j = p.length - 1; j >= 0; j--) {
    var a0 = X(p[j][0]), a1 = X(j + 1 < p.length ? p[j + 1][0] : b.e);
    ctx.lineTo(a1, Y(p[j][1])); ctx.lineTo(a0, Y(p[j][1]));
  }
  ctx.closePath();
}
// the band under trace entry i and byte offset b, or -1
function bandAt(bands, i, b) {
  for (var k = 0; k < bands.length; k++) {
    var d = bands[k];
    if (i < d.s || i >= d.e) continue;
    var p = d.p, o = p[0][1];
    for (var j = 0; j < p.length && p[j][0] <= i; j++) o = p[j][1];
    if (b >= o && b < o + d.sz) return k;
  }
  return -1;
}
// seconds since t0 (µs), with as many decimals as a step of `step` µs needs
function fmtTime(us, t0, step) {
  var d = Math.max(0, Math.min(6, Math.ceil(-Math.log10((step || 1e6) / 1e6))));
  return ((us - t0) / 1e6).toFixed(d) + " s";
}
// a round step in µs (1, 2 or 5 times a power of ten) giving about `want`
// ticks over `span` µs
function roundStep(span, want) {
  var raw = Math.max(1, span / want), step = 1;
  while (step * 10 <= raw) step *= 10;
  return step * (raw >= 5 * step ? 5 : raw >= 2 * step ? 2 : 1);
}
// ticks [[entry, µs]] for entries v0..v1, round in seconds since t0 (µs),
// from curve points [entry, ..., µs] at index `ti` (times in entry order),
// each tick's entry interpolated between the points around its time
function timeTicks(pts, ti, v0, v1, want, t0) {
  var p = pts.filter(function (q) { return q[ti] !== null && q[ti] !== undefined; });
  if (p.length < 2) return {step: 0, ticks: []};
  var at = function (i) {
    var j = 0;
    while (j + 1 < p.length && p[j + 1][0] <= i) j++;
    if (j + 1 >= p.length || p[j + 1][0] === p[j][0]) return p[j][ti];
    return p[j][ti] + (p[j + 1][ti] - p[j][ti]) * (i - p[j][0]) / (p[j + 1][0] - p[j][0]);
  };
  var a = at(v0), b = at(v1);
  if (!(b > a)) return {step: 0, ticks: []};
  var step = roundStep(b - a, want), ticks = [];
  // round in seconds since t0
  for (var t = t0 + Math.ceil((a - t0) / step) * step; t <= b && ticks.length < 100; t += step) {
    var k = 0;
    while (k < p.length && p[k][ti] < t) k++;
    var e = k === 0 ? p[0][0] : k >= p.length ? p[p.length - 1][0] :
      p[k - 1][0] + (p[k][0] - p[k - 1][0]) * (t - p[k - 1][ti]) / Math.max(p[k][ti] - p[k - 1][ti], 1);
    ticks.push([e, t]);
  }
  return {step: step, ticks: ticks};
}
// the time axis under a timeline: a tick and a label (seconds since t0)
// at each [entry, µs] inside [xmin, xmax]; labels never overlap. Returns
// the labels drawn.
function drawTimeAxis(ctx, ticks, t0, step, X, y, xmin, xmax) {
  var drawn = [], lastX = -1e9;
  ctx.strokeStyle = "#222"; ctx.fillStyle = "#222";
  ticks.forEach(function (k) {
    var x = X(k[0]), label = fmtTime(k[1], t0, step), w = ctx.measureText(label).width;
    if (x < xmin || x > xmax) return;
    ctx.beginPath(); ctx.moveTo(x, y); ctx.lineTo(x, y + 4); ctx.stroke();
    if (x - w / 2 < lastX + 8) return;
    ctx.fillText(label, x - w / 2, y + 15); lastX = x + w / 2; drawn.push(label);
  });
  if (!ticks.length) ctx.fillText("(no times recorded: the axis is trace entries)", (xmin + xmax) / 2 - 120, y + 15);
  return drawn;
}
// the timeline's plot: all allocated bytes (grey, from curve points
// [entry, allocated, reserved]) from entry a to b, the bands over it (band
// `hi` dark), reserved bytes dashed. Returns how many bands were drawn.
function drawPlot(ctx, total, bands, a, b, v0, v1, X, Y, hi) {
  var drawn = 0;
  ctx.fillStyle = "#ddd"; ctx.beginPath(); ctx.moveTo(X(a), Y(0));
  total.forEach(function (p) { ctx.lineTo(X(p[0]), Y(p[1])); });
  ctx.lineTo(X(b), Y(0)); ctx.closePath(); ctx.fill();
  bands.forEach(function (d, k) {
    if (d.e < v0 || d.s > v1) return;
    ctx.fillStyle = k === hi ? "#222" : catColour(d.cat, k);
    bandPath(ctx, d, X, Y); ctx.fill(); drawn++;
  });
  ctx.strokeStyle = "#555"; ctx.setLineDash([4, 3]); ctx.beginPath();
  total.forEach(function (p, j) { if (j) ctx.lineTo(X(p[0]), Y(p[2])); else ctx.moveTo(X(p[0]), Y(p[2])); });
  ctx.stroke(); ctx.setLineDash([]);
  return drawn;
}
