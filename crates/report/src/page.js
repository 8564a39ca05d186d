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
