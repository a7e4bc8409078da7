// VllmPrefixCache view: vLLM's cached blocks as a tree of block hashes, its one drawing a
// plotly FigureWidget built in Python (widgets/vllm_kv.py), mounted by ilPlot. Around it, in
// HTML: the connector's warnings, a line of vLLM's own numbers, and what vLLM's events
// cannot tell (the notes).
function render({ model, el }) {
  const root = ilEl("div", "il-view il-vllm-kv", el);
  ilLive(model, root);
  const warn = ilEl("div", "il-vkv-warn", root);
  const stats = ilEl("div", "il-stats il-vkv-stats", root);
  const box = ilEl("div", "il-plot il-vkv-plot", root);
  const notes = ilEl("ul", "il-vkv-notes", root);
  ilScrubber(model, root, () => {});
  const showStats = () => {
    const sm = model.get("summary");
    const hit = sm.prompt_tokens ? (100 * sm.hit_tokens / sm.prompt_tokens).toFixed(0) + "%" : "–";
    stats.textContent = `${sm.cached ?? 0} blocks cached · ${sm.evicted ?? 0} evicted · ` +
      `${sm.shared ?? 0} shared prefix${(sm.shared ?? 0) === 1 ? "" : "es"} · vLLM KV usage ${sm.blocks_used ?? 0}/${sm.blocks_total ?? 0} blocks · ` +
      `prefix hits ${sm.hit_tokens ?? 0} of ${sm.prompt_tokens ?? 0} prompt tokens (${hit}) · block = ${sm.block_size ?? "?"} tokens` +
      (sm.drawn < (sm.cached + sm.evicted) ? ` · newest ${sm.drawn} drawn` : "");
    root.dataset.shown = String(model.get("shown"));
    root.dataset.nodes = String(sm.drawn ?? 0);
  };
  const showNotes = () => {
    notes.replaceChildren();
    for (const t of model.get("notes")) ilEl("li", "", notes, t);
  };
  const showWarn = () => {
    const w = model.get("warnings");
    warn.replaceChildren();
    warn.style.display = w.length ? "block" : "none";
    root.dataset.warnings = String(w.length);
    if (!w.length) return;
    ilEl("div", "il-vkv-warn-title", warn, `⚠ ${w.length} warning${w.length > 1 ? "s" : ""} from the connector`);
    for (const t of w.slice(-5)) ilEl("div", "il-vkv-warn-item", warn, t);
  };
  model.on("change:summary", showStats); model.on("change:shown", showStats);
  model.on("change:notes", showNotes); model.on("change:warnings", showWarn);
  showStats(); showNotes(); showWarn();
  return ilPlot(model, root, box, ["shown"]);
}

export default { render };
