// KVBlockMap view: one cell per physical block. Colour = owner, fill height = tokens in block.
function render({ model, el }) {
  const root = ilEl("div", "il-view il-kv-map", el);
  const head = ilHeader(model, root);
  const canvas = ilEl("canvas", "il-canvas il-kv-canvas", root);
  const tip = ilTooltip(root);
  const legend = ilEl("div", "il-legend", root);
  const item = (cls, text) => { const s = ilEl("span", "", legend); ilEl("i", cls, s); s.append(text); };
  item("il-kv-l-used", "used (fill = tokens)"); item("il-kv-l-free", "free");
  item("il-kv-l-cached", "prefix-cached"); item("il-kv-l-shared", "shared (ref > 1)");
  item("il-kv-l-reserved", "reserved, unused (waste)");
  ilScrubber(model, root, () => {});
  let geo = null;
  const F = model.get("flags");      // block-state bits, named in kv_map.py
  const draw = () => {
    const th = ilTheme(root);
    const owner = ilArr(model, "cell_owner", Int32Array), fill = ilArr(model, "cell_fill", Uint8Array);
    const ref = ilArr(model, "cell_ref", Uint8Array), flags = ilArr(model, "cell_flags", Uint8Array);
    const bs = Math.max(1, model.get("block_size"));
    const n = owner.length;
    const W = Math.max(200, root.clientWidth - 22);
    const cell = n <= 256 ? 22 : n <= 1024 ? 14 : n <= 4096 ? 8 : 5;
    const pad = cell >= 8 ? 2 : 1;
    const cols = Math.max(1, Math.floor(W / cell));
    const rows = Math.ceil(n / cols);
    const H = Math.max(cell, rows * cell);
    const ctx = ilCanvas(canvas, W, H);
    ctx.clearRect(0, 0, W, H);
    const s = cell - pad;
    for (let b = 0; b < n; b++) {
      const x = (b % cols) * cell, y = Math.floor(b / cols) * cell;
      const o = owner[b], f = flags[b];
      if (o < 0) {
        ctx.strokeStyle = th.border; ctx.lineWidth = 1;
        ctx.strokeRect(x + 0.5, y + 0.5, s - 1, s - 1);
        if (f & F.cached) { ctx.fillStyle = th.kv.cached; ctx.globalAlpha = 0.55; ctx.fillRect(x + 2, y + 2, s - 4, s - 4); ctx.globalAlpha = 1; }
        continue;
      }
      const c = ilOwnerColor(th, o);
      ctx.fillStyle = c; ctx.globalAlpha = 0.28; ctx.fillRect(x, y, s, s); ctx.globalAlpha = 1;
      const h = Math.round((fill[b] / bs) * s);
      ctx.fillRect(x, y + s - h, s, h);
      if (f & F.reserved) {   // reserved, unused: hatched waste
        ctx.strokeStyle = th.kv.reserved; ctx.lineWidth = 1; ctx.beginPath();
        ctx.moveTo(x, y + s); ctx.lineTo(x + s, y); ctx.stroke();
      }
      if (f & F.shared) { ctx.strokeStyle = th.fg; ctx.lineWidth = cell >= 14 ? 2 : 1; ctx.strokeRect(x + 1, y + 1, s - 2, s - 2); }
      if ((f & F.cached) && cell >= 8) { ctx.fillStyle = th.kv.cached; ctx.beginPath(); ctx.arc(x + s - 3, y + 3, cell >= 14 ? 3 : 2, 0, 7); ctx.fill(); }
    }
    ctx.lineWidth = 1;
    const sm = model.get("summary");
    const waste = sm.slots_allocated ? 1 - sm.tokens_used / sm.slots_allocated : 0;
    head.stats.textContent = `${model.get("kv_layout")} · ${sm.blocks_used ?? 0}/${sm.blocks_total ?? n} blocks used · ` +
      `${sm.tokens_used ?? 0} tokens in ${sm.slots_allocated ?? 0} slots (waste ${(waste * 100).toFixed(1)}%) · ` +
      `${sm.shared ?? 0} shared · ${sm.cached ?? 0} cached · block = ${bs} tokens`;
    geo = { cell, cols, n, owner, fill, ref, flags };
    root.dataset.shown = String(model.get("shown"));
  };
  canvas.addEventListener("mousemove", (ev) => {
    if (!geo) return;
    const r = canvas.getBoundingClientRect();
    const x = ev.clientX - r.left, y = ev.clientY - r.top;
    const b = Math.floor(y / geo.cell) * geo.cols + Math.floor(x / geo.cell);
    if (b < 0 || b >= geo.n || x >= geo.cols * geo.cell) { tip.hide(); return; }
    const o = geo.owner[b], f = geo.flags[b];
    const who = o >= 0 ? model.get("owners")[o] : "free";
    const tags = [f & F.cached ? "prefix-cached" : "", f & F.shared ? "shared" : "", f & F.reserved ? "reserved, unused" : ""].filter(Boolean);
    tip.show(x, y, `block ${b} · ${who}\n${geo.fill[b]}/${model.get("block_size")} tokens · ref ${geo.ref[b]}` +
      (tags.length ? "\n" + tags.join(", ") : ""));
    root.dataset.hover = String(b);
  });
  canvas.addEventListener("mouseleave", () => tip.hide());
  const redraw = ilScheduler(root, draw);
  for (const nm of ["cell_owner", "cell_fill", "cell_flags", "summary", "shown"]) model.on("change:" + nm, redraw);
  const ro = new ResizeObserver(redraw); ro.observe(root);
  redraw();
  const offTheme = ilOnThemeChange(() => redraw());
  return () => { ro.disconnect(); offTheme(); };
}

export default { render };
