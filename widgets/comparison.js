// BatchingComparison view: two configs side by side on one time axis.
function render({ model, el }) {
  const root = ilEl("div", "il-view il-compare", el);
  const head = ilHeader(model, root);
  const cols = ilEl("div", "il-cmp-cols", root);
  const bottom = ilEl("div", "il-cmp-bottom", root);
  const lat = ilEl("canvas", "il-canvas il-cmp-lat", bottom);
  const table = ilEl("table", "il-cmp-table", bottom);
  const legend = ilEl("div", "il-legend", root);
  IL_KIND_NAME.forEach((k, i) => { const s = ilEl("span", "", legend); const b = ilEl("i", "", s); b.style.background = ilKindCss(k); s.append(k); });
  ilScrubber(model, root, () => redraw());
  const dv = (s, k, T) => (s[k] && s[k].byteLength ? new T(s[k].buffer.slice(s[k].byteOffset, s[k].byteOffset + s[k].byteLength)) : new T(0));
  const draw = () => {
    const th = ilTheme(root);
    const sides = model.get("sides");
    const { t, tMax } = ilShown(model);
    cols.replaceChildren();
    const W = Math.max(200, Math.floor((root.clientWidth - 40) / Math.max(1, sides.length)));
    sides.forEach((s, si) => {
      const col = ilEl("div", "il-cmp-col", cols);
      ilEl("div", "il-cmp-label", col, s.label).style.borderColor = ilOwnerColor(th, si);
      const c1 = ilEl("canvas", "il-canvas", col);
      const lanes = s.lanes || [];
      const h = Math.min(240, Math.max(40, lanes.length * 10));
      const ctx = ilCanvas(c1, W, h);
      ilDrawLanes(ctx, { lanes, segLane: dv(s, "seg_lane", Int32Array), segKind: dv(s, "seg_kind", Uint8Array),
        segT0: dv(s, "seg_t0", Float64Array), segT1: dv(s, "seg_t1", Float64Array),
        finLane: dv(s, "fin_lane", Int32Array), finT: dv(s, "fin_t", Float64Array),
        finAborted: dv(s, "fin_aborted", Uint8Array), x0: 0, w: W, y0: 0, h, tMax, tCut: t, theme: th });
      // occupancy: requests in the batch over time
      const c2 = ilEl("canvas", "il-canvas", col);
      const oh = 50, octx = ilCanvas(c2, W, oh + 14);
      const ot = dv(s, "occ_t", Float64Array), on = dv(s, "occ_n", Int32Array);
      let mx = 1; for (const v of on) mx = Math.max(mx, v);
      octx.strokeStyle = th.border; octx.strokeRect(0.5, 0.5, W - 1, oh);
      octx.fillStyle = ilOwnerColor(th, si); octx.globalAlpha = 0.7;
      let prev = 0;
      for (let i = 0; i < ot.length && ot[i] <= t + 1e-12; i++) {
        const x0 = (prev / tMax) * W, x1 = (ot[i] / tMax) * W, hh = (on[i] / mx) * (oh - 2);
        octx.fillRect(x0, oh - hh, Math.max(1, x1 - x0), hh); prev = ot[i];
      }
      octx.globalAlpha = 1; octx.fillStyle = th.fg2; octx.font = `10px ${th.font}`; octx.textBaseline = "top";
      octx.fillText(`batch size (max ${mx}) · ${ilMs(s.duration)}`, 2, oh + 2);
    });
    // latency strip plot: TTFT and E2E per side
    const LW = Math.min(520, root.clientWidth - 280), LH = 30 * sides.length * 2 + 20;
    const lctx = ilCanvas(lat, Math.max(200, LW), LH);
    let lmax = 1e-9;
    sides.forEach((s) => { for (const v of dv(s, "e2e", Float64Array)) lmax = Math.max(lmax, v); for (const v of dv(s, "ttft", Float64Array)) lmax = Math.max(lmax, v); });
    lctx.font = `10px ${th.font}`; lctx.textBaseline = "middle";
    let row = 0;
    sides.forEach((s, si) => ["ttft", "e2e"].forEach((key) => {
      const y = 10 + row * 30 + 15;
      lctx.fillStyle = th.fg2; lctx.fillText(`${s.label} ${key.toUpperCase()}`, 2, y);
      lctx.fillStyle = ilOwnerColor(th, si); lctx.globalAlpha = 0.6;
      const vals = dv(s, key, Float64Array);
      vals.forEach((v, i) => { const x = 110 + (v / lmax) * (LW - 120); lctx.fillRect(x - 1.5, y - 6 + ((i * 7) % 12), 3, 3); });
      lctx.globalAlpha = 1; row++;
    }));
    lctx.fillStyle = th.fg2; lctx.fillText(`0 … ${ilMs(lmax)}`, 110, LH - 6);
    const mean = (a) => (a.length ? a.reduce((x, y) => x + y, 0) / a.length : NaN);
    const p = (a, q) => { const b = Array.from(a).sort((x, y) => x - y); return b.length ? b[Math.min(b.length - 1, Math.floor(q * b.length))] : NaN; };
    table.innerHTML = "<tr><th></th><th>tok/s</th><th>TTFT mean</th><th>E2E p90</th><th>done</th></tr>";
    sides.forEach((s) => {
      const tr = ilEl("tr", "", table);
      [s.label, s.throughput.toFixed(1), ilMs(mean(dv(s, "ttft", Float64Array))), ilMs(p(dv(s, "e2e", Float64Array), 0.9)), String(s.finished)]
        .forEach((v) => ilEl("td", "", tr, v));
    });
    head.stats.textContent = sides.map((s) => `${s.label}: ${ilMs(s.duration)}`).join(" vs ");
  };
  const redraw = ilScheduler(root, draw);
  for (const nm of ["sides", "cursor", "num_steps"]) model.on("change:" + nm, redraw);
  const ro = new ResizeObserver(() => redraw()); ro.observe(cols);
  redraw();
  const offTheme = ilOnThemeChange(() => redraw());
  return () => { ro.disconnect(); offTheme(); };
}

export default { render };
