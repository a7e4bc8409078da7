// VllmPrefixCache view: vLLM's cached blocks as a tree of block hashes (depth = blocks from the
// prompt's start, a branch per continuation). Filled = cached now, hollow = evicted, ring = a
// block several chains continue. Notes say what vLLM's events cannot tell; warnings are shown.
function render({ model, el }) {
  const root = ilEl("div", "il-view il-vllm-kv", el);
  const head = ilHeader(model, root);
  const warn = ilEl("div", "il-vkv-warn", root);
  const wrap = ilEl("div", "il-vkv-wrap", root);
  const canvas = ilEl("canvas", "il-canvas il-vkv-canvas", wrap);
  const tip = ilTooltip(root);
  const legend = ilEl("div", "il-legend", root);
  const item = (cls, text) => { const s = ilEl("span", "", legend); ilEl("i", cls, s); s.append(text); };
  item("il-vkv-l-cached", "cached block (by hash)"); item("il-vkv-l-evicted", "evicted");
  item("il-vkv-l-shared", "continued by several prompts");
  const notes = ilEl("ul", "il-vkv-notes", root);
  ilScrubber(model, root, () => {});
  let geo = null;
  const draw = () => {
    const th = ilTheme(root);
    const id = ilArr(model, "node_id", Int32Array), depth = ilArr(model, "node_depth", Int32Array);
    const row = ilArr(model, "node_row", Int32Array), par = ilArr(model, "node_parent", Int32Array);
    const state = ilArr(model, "node_state", Uint8Array), shared = ilArr(model, "node_shared", Uint8Array);
    const step = ilArr(model, "node_step", Int32Array);
    const n = id.length;
    let maxD = 1, maxR = 0;
    for (let i = 0; i < n; i++) { maxD = Math.max(maxD, depth[i]); maxR = Math.max(maxR, row[i]); }
    const W = Math.max(240, root.clientWidth - 22);
    const dx = Math.max(6, Math.min(80, (W - 16) / maxD));   // a short tree still spans the view
    const dy = maxR > 60 ? 8 : maxR > 25 ? 12 : 18;
    const s = Math.max(4, Math.min(dx, dy) - 4);
    const H = Math.max(dy, (maxR + 1) * dy + 4);
    const ctx = ilCanvas(canvas, W, Math.min(H, 4000));
    ctx.clearRect(0, 0, W, H);
    const cx = (i) => 4 + (depth[i] - 0.5) * dx, cy = (i) => 2 + (row[i] + 0.5) * dy;
    ctx.strokeStyle = th.border; ctx.lineWidth = 1; ctx.beginPath();
    for (let i = 0; i < n; i++) {
      const p = par[i];
      if (p < 0) continue;
      ctx.moveTo(cx(p), cy(p)); ctx.lineTo(cx(i), cy(i));
    }
    ctx.stroke();
    for (let i = 0; i < n; i++) {
      const x = cx(i) - s / 2, y = cy(i) - s / 2;
      if (state[i] === 1) { ctx.fillStyle = th.kv.cached; ctx.fillRect(x, y, s, s); }
      else { ctx.fillStyle = th.bg; ctx.fillRect(x, y, s, s); }
      ctx.strokeStyle = state[i] === 1 ? th.fg2 : th.kv.free; ctx.lineWidth = 1;
      ctx.strokeRect(x + 0.5, y + 0.5, s - 1, s - 1);
      if (shared[i]) { ctx.strokeStyle = th.fg; ctx.lineWidth = 2; ctx.strokeRect(x - 1.5, y - 1.5, s + 3, s + 3); }
    }
    ctx.lineWidth = 1;
    const sm = model.get("summary");
    const hit = sm.prompt_tokens ? (100 * sm.hit_tokens / sm.prompt_tokens).toFixed(0) + "%" : "–";
    head.stats.textContent = `${sm.cached ?? 0} blocks cached · ${sm.evicted ?? 0} evicted · ` +
      `${sm.shared ?? 0} shared prefix${(sm.shared ?? 0) === 1 ? "" : "es"} · vLLM KV usage ${sm.blocks_used ?? 0}/${sm.blocks_total ?? 0} blocks · ` +
      `prefix hits ${sm.hit_tokens ?? 0} of ${sm.prompt_tokens ?? 0} prompt tokens (${hit}) · block = ${sm.block_size ?? "?"} tokens` +
      (sm.drawn < (sm.cached + sm.evicted) ? ` · newest ${sm.drawn} drawn` : "");
    geo = { n, id, depth, row, state, shared, step, dx, dy, cx, cy, s };
    root.dataset.shown = String(model.get("shown"));
    root.dataset.nodes = String(n);
  };
  const showNotes = () => {
    notes.replaceChildren();
    for (const t of model.get("notes")) ilEl("li", "", notes, t);
  };
  const showWarn = () => {
    const w = model.get("warnings");
    warn.replaceChildren();
    warn.style.display = w.length ? "block" : "none";
    if (!w.length) return;
    ilEl("div", "il-vkv-warn-title", warn, `⚠ ${w.length} warning${w.length > 1 ? "s" : ""} from the connector`);
    for (const t of w.slice(-5)) ilEl("div", "il-vkv-warn-item", warn, t);
    root.dataset.warnings = String(w.length);
  };
  canvas.addEventListener("mousemove", (ev) => {
    if (!geo) return;
    const r = canvas.getBoundingClientRect();
    const x = ev.clientX - r.left, y = ev.clientY - r.top;
    let best = -1;
    for (let i = 0; i < geo.n; i++) {
      if (Math.abs(geo.cx(i) - x) <= geo.s / 2 + 1 && Math.abs(geo.cy(i) - y) <= geo.s / 2 + 1) { best = i; break; }
    }
    if (best < 0) { tip.hide(); return; }
    const i = best;
    tip.show(x, y, `block #${geo.id[i]} · ${geo.depth[i]} block${geo.depth[i] === 1 ? "" : "s"} from the start\n` +
      `${geo.state[i] === 1 ? "cached" : "evicted"} · stored at step ${geo.step[i] + 1}` +
      (geo.shared[i] ? "\ncontinued by several prompts" : ""));
    root.dataset.hover = String(geo.id[i]);
  });
  canvas.addEventListener("mouseleave", () => tip.hide());
  const redraw = ilScheduler(root, draw);
  for (const nm of ["node_id", "node_state", "summary", "shown"]) model.on("change:" + nm, redraw);
  model.on("change:notes", showNotes); model.on("change:warnings", showWarn);
  const ro = new ResizeObserver(redraw); ro.observe(root);
  showNotes(); showWarn(); redraw();
  const offTheme = ilOnThemeChange(() => redraw());
  return () => { ro.disconnect(); offTheme(); };
}

export default { render };
