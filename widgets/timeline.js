// SchedulerTimeline view: canvas lanes per request + a per-step batch strip.
function render({ model, el }) {
  const root = ilEl("div", "il-view il-timeline", el);
  const head = ilHeader(model, root);
  const wrap = ilEl("div", "il-tl-wrap", root);
  const canvas = ilEl("canvas", "il-canvas il-tl-canvas", wrap);
  const tip = ilTooltip(root);
  const legend = ilEl("div", "il-legend", root);
  IL_KIND_NAME.forEach((k, i) => { const s = ilEl("span", "", legend); const b = ilEl("i", "", s); b.style.background = ilKindCss(k); s.append(k); });
  const fs = ilEl("span", "", legend); ilEl("i", "il-tl-finish", fs); fs.append("finished");
  ilScrubber(model, root, () => redraw());
  let geo = null;
  const LABEL = 64, STRIP = 64;
  const draw = () => {
    const th = ilTheme(root);
    const lanes = model.get("lanes");
    const d = {
      lanes, segLane: ilArr(model, "seg_lane", Int32Array), segKind: ilArr(model, "seg_kind", Uint8Array),
      segT0: ilArr(model, "seg_t0", Float64Array), segT1: ilArr(model, "seg_t1", Float64Array),
      finLane: ilArr(model, "fin_lane", Int32Array), finT: ilArr(model, "fin_t", Float64Array),
      finAborted: ilArr(model, "fin_aborted", Uint8Array),
    };
    const { t, tMax, n, k } = ilShown(model);
    const tEnd = ilArr(model, "step_times", Float64Array);
    const tStart = ilArr(model, "step_t0", Float64Array);
    const pre = ilArr(model, "step_prefill", Int32Array), dec = ilArr(model, "step_decode", Int32Array);
    const run = ilArr(model, "step_running", Int32Array);
    const budget = model.get("token_budget");
    const W = Math.max(300, root.clientWidth - 22);
    const lanesH = Math.min(420, Math.max(40, lanes.length * 14));
    const H = lanesH + STRIP + 28;
    const ctx = ilCanvas(canvas, W, H);
    ctx.font = `10px ${th.font}`;
    ctx.clearRect(0, 0, W, H);
    const plotW = W - LABEL - 8;
    const g = ilDrawLanes(ctx, { ...d, x0: LABEL, w: plotW, y0: 0, h: lanesH, tMax, tCut: t, theme: th });
    ctx.fillStyle = th.fg2; ctx.textBaseline = "middle";
    const prio = model.get("lane_priority") || [];
    if (g.lh >= 9) lanes.forEach((id, i) => {
      const y = i * g.lh + g.lh / 2;
      ctx.fillText(id.slice(0, prio[i] ? 6 : 9), 2, y);
      if (prio[i]) { ctx.textAlign = "right"; ctx.fillText(`p=${prio[i]}`, LABEL - 3, y); ctx.textAlign = "left"; }
    });
    else ctx.fillText(`${lanes.length} requests`, 2, 8);
    // batch strip: prefill + decode tokens per step, scaled to the largest step (budget line if near)
    const y0 = lanesH + 6;
    let maxTok = 1, maxRun = 1;
    for (let i = 0; i < n; i++) { maxTok = Math.max(maxTok, pre[i] + dec[i]); maxRun = Math.max(maxRun, run[i]); }
    const scale = budget && budget <= maxTok * 1.25 ? budget : maxTok;
    ctx.strokeStyle = th.border; ctx.strokeRect(LABEL, y0, plotW, STRIP);
    for (let i = 0; i <= k; i++) {
      const x = g.sx(tStart[i]), w = Math.max(1, g.sx(tEnd[i]) - x);
      const hp = (pre[i] / scale) * STRIP, hd = (dec[i] / scale) * STRIP;
      ctx.fillStyle = th.kind[1]; ctx.fillRect(x, y0 + STRIP - hp, w, hp);
      ctx.fillStyle = th.kind[2]; ctx.fillRect(x, y0 + STRIP - hp - hd, w, Math.max(hd, dec[i] ? 1 : 0));
    }
    if (scale === budget) {
      ctx.setLineDash([4, 3]); ctx.strokeStyle = th.fg2;
      ctx.beginPath(); ctx.moveTo(LABEL, y0); ctx.lineTo(LABEL + plotW, y0); ctx.stroke(); ctx.setLineDash([]);
    }
    ctx.fillStyle = th.fg2;
    ctx.fillText("tokens/step", 2, y0 + 8);
    ctx.fillText(scale === budget ? `budget ${budget}` : `max ${maxTok}`, 2, y0 + 22);
    // time axis
    ctx.fillStyle = th.fg2; ctx.textBaseline = "top";
    for (let j = 0; j <= 4; j++) {
      const tt = (tMax * j) / 4, x = g.sx(tt);
      ctx.textAlign = j === 4 ? "right" : j === 0 ? "left" : "center";
      ctx.fillText(ilMs(tt), j === 4 ? LABEL + plotW : x, y0 + STRIP + 6);
      ctx.textAlign = "left";
    }
    if (n && k < n - 1) {
      ctx.strokeStyle = th.accent; ctx.lineWidth = 1.5;
      ctx.beginPath(); ctx.moveTo(g.sx(t), 0); ctx.lineTo(g.sx(t), y0 + STRIP); ctx.stroke(); ctx.lineWidth = 1;
    }
    let prefill = 0, decode = 0;
    for (let i = 0; i <= k; i++) { prefill += pre[i]; decode += dec[i]; }
    head.stats.textContent = `${lanes.length} requests · ${n} steps · ${prefill} prefill + ${decode} decode tokens · ` +
      `≤ ${maxRun} per batch · ${ilMs(tMax)}`;
    geo = { g, d, lanesH, y0, tStart, tEnd, pre, dec, run, k, t };
  };
  canvas.addEventListener("mousemove", (ev) => {
    if (!geo) return;
    const r = canvas.getBoundingClientRect();
    const x = ev.clientX - r.left, y = ev.clientY - r.top;
    const { g, d } = geo;
    const tm = ((x - LABEL) / (canvas.clientWidth - LABEL - 8)) * ilShown(model).tMax;
    let text = null;
    if (y < geo.lanesH) {
      const lane = Math.floor(y / g.lh);
      for (let i = 0; i < d.segLane.length; i++) {
        if (d.segLane[i] === lane && d.segT0[i] <= tm && tm <= Math.max(d.segT1[i], d.segT0[i] + 1e-4) && d.segT0[i] <= geo.t) {
          const s0 = ilArr(model, "seg_step0", Int32Array)[i], s1 = ilArr(model, "seg_step1", Int32Array)[i];
          const tok = ilArr(model, "seg_tokens", Int32Array)[i];
          const p = (model.get("lane_priority") || [])[lane];
          text = `${d.lanes[lane]}${p ? ` (p=${p})` : ""} · ${IL_KIND_NAME[d.segKind[i]]}\n${ilMs(d.segT0[i])} → ${ilMs(d.segT1[i])}` +
            (tok ? ` · ${tok} tokens` : "") + `\nsteps ${s0}–${s1}`;
          break;
        }
      }
    } else {
      for (let i = 0; i <= geo.k; i++) if (geo.tStart[i] <= tm && tm <= geo.tEnd[i]) {
        text = `step ${i}: ${geo.pre[i]} prefill + ${geo.dec[i]} decode tokens\n${geo.run[i]} requests · ${ilMs(geo.tEnd[i] - geo.tStart[i])}`;
        break;
      }
    }
    if (text) tip.show(x, y, text); else tip.hide();
    root.dataset.hover = text ? "1" : "0";
  });
  canvas.addEventListener("mouseleave", () => tip.hide());
  const redraw = ilScheduler(root, draw);
  for (const nm of ["lanes", "lane_priority", "seg_lane", "seg_t1", "step_times", "cursor", "num_steps"]) model.on("change:" + nm, redraw);
  const ro = new ResizeObserver(redraw); ro.observe(root);
  redraw();
  const offTheme = ilOnThemeChange(() => redraw());
  return () => { ro.disconnect(); offTheme(); };
}

export default { render };
