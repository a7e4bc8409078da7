// KVBlockMap view: the KV map's one drawing, a plotly FigureWidget built in Python
// (inferlab.lab.drawings.kv_map; the block-state bits are named in kv_map.py), shown here as
// a child widget between the header and the scrubber. Python updates the figure in place;
// this file only mounts it, follows the page's theme (the `dark` trait) and marks the step.
function render({ model, el }) {
  const root = ilEl("div", "il-view il-kv-map", el);
  // the figure carries the title and the clock; the header only says when the map is live
  const head = ilEl("div", "il-header il-kv-head", root);
  const badge = ilEl("span", "il-badge", head);
  const live = () => { head.style.display = model.get("live") ? "" : "none"; badge.textContent = "● live"; };
  model.on("change:live", live);
  live();
  const box = ilEl("div", "il-kv-plot", root);
  ilScrubber(model, root, () => {});
  let view = null, gone = false, asked = 0;
  const mount = async () => {
    const ref = model.get("plot"), mine = ++asked;
    if (!ref) return;
    const child = await model.widget_manager.get_model(String(ref).replace(/^IPY_MODEL_/, ""));
    const v = await model.widget_manager.create_view(child, {});
    if (gone || mine !== asked) { v.remove(); return; }
    if (view) view.remove();
    view = v;
    box.replaceChildren(v.el);
    v.trigger("displayed");
    // plotly sizes itself to its box once attached: tell it the box is there now
    requestAnimationFrame(() => window.dispatchEvent(new Event("resize")));
    root.dataset.plot = child.model_id;
  };
  // count the plot's redraws (data-draws, data-draw-ms: from the step's arrival to the
  // plot drawn), as every view does for the browser tests and `inferlab bench widgets`:
  // one per animation frame in which plotly changed the plot's DOM
  let since = null, queued = false;
  const drawn = () => {
    if (queued) return;
    queued = true;
    requestAnimationFrame(() => {
      queued = false;
      root.dataset.draws = String(parseInt(root.dataset.draws || "0", 10) + 1);
      if (since !== null) root.dataset.drawMs = String(performance.now() - since);
      since = null;
    });
  };
  const watch = new MutationObserver(drawn);
  watch.observe(box, { childList: true, subtree: true, attributes: true, characterData: true });
  const theme = () => {
    const dark = document.body.dataset.jpThemeLight === "false";
    if (model.get("dark") !== dark) { model.set("dark", dark); model.save_changes(); }
  };
  const shown = () => { root.dataset.shown = String(model.get("shown")); since = performance.now(); };
  model.on("change:plot", mount);
  model.on("change:shown", shown);
  mount().catch((e) => { box.textContent = `KV map: the plot could not be shown (${e})`; });
  shown();
  theme();
  const offTheme = ilOnThemeChange(theme);
  return () => { gone = true; watch.disconnect(); offTheme(); if (view) view.remove(); };
}

export default { render };
