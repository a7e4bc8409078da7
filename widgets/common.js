// Shared helpers, prepended to each view's ESM by Python (no imports, no network).
// Colours: the palette lives in inferlab/lab/palette.py only; Python puts it on the view's
// root (.il-view) as CSS variables (--il-kind-*, --il-owner-*, --il-kv-*), read here.
const IL_KIND_NAME = ["queued", "prefill", "decode", "preempted"];   // seg_kind codes 0..3
const IL_KV_NAME = ["used", "free", "cached", "reserved"];

function ilVar(el, name, fallback) {
  const st = el instanceof CSSStyleDeclaration ? el : getComputedStyle(el);
  const v = st.getPropertyValue(name).trim();
  return v || fallback;
}

// theme (JupyterLab --jp-* colours, with fallbacks) + our palette (--il-* variables)
function ilTheme(el) {
  const st = getComputedStyle(el);
  const th = {
    fg: ilVar(st, "--jp-ui-font-color1", "#222"),
    fg2: ilVar(st, "--jp-ui-font-color2", "#666"),
    border: ilVar(st, "--jp-border-color2", "#ddd"),
    bg: ilVar(st, "--jp-layout-color1", "#fff"),
    bg2: ilVar(st, "--jp-layout-color2", "#eee"),
    accent: ilVar(st, "--jp-brand-color1", "#1976d2"),
    font: ilVar(st, "--jp-ui-font-family", "sans-serif"),
  };
  // a missing palette variable (stylesheet not loaded) draws in the text colour, never black
  th.kind = IL_KIND_NAME.map((k) => ilVar(st, "--il-kind-" + k, th.fg2));
  th.kv = {};
  for (const k of IL_KV_NAME) th.kv[k] = ilVar(st, "--il-kv-" + k, th.fg2);
  const n = parseInt(ilVar(st, "--il-owner-count", "0"), 10) || 0;
  th.owners = [];
  for (let i = 0; i < n; i++) th.owners.push(ilVar(st, "--il-owner-" + i, th.fg2));
  if (!th.owners.length) th.owners.push(th.fg2);
  return th;
}

function ilOwnerColor(th, i) {
  if (i < 0) return null;
  return th.owners[i % th.owners.length];
}

// a CSS colour for static markup (legend swatches) that follows the palette variables
function ilKindCss(k) { return `var(--il-kind-${k})`; }

// a trait holding bytes (DataView) as a typed array
function ilArr(model, name, Type) {
  const dv = model.get(name);
  if (!dv || !dv.byteLength) return new Type(0);
  const buf = dv.buffer.slice(dv.byteOffset, dv.byteOffset + dv.byteLength);
  return new Type(buf);
}

function ilEl(tag, cls, parent, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}

function ilMs(s) {
  if (!isFinite(s)) return "–";
  const ms = s * 1e3;
  return ms >= 1000 ? (ms / 1e3).toFixed(2) + " s" : ms >= 10 ? ms.toFixed(0) + " ms"
    : ms.toFixed(1) + " ms";
}

// header: title + clock badge + a stats line
function ilHeader(model, root) {
  const h = ilEl("div", "il-header", root);
  const title = ilEl("span", "il-title", h);
  const badge = ilEl("span", "il-badge", h);
  const stats = ilEl("span", "il-stats", h);
  const up = () => {
    title.textContent = model.get("title");
    badge.textContent = (model.get("live") ? "● live · " : "") + "clock: " + model.get("clock");
  };
  model.on("change:title", up); model.on("change:live", up); model.on("change:clock", up);
  up();
  return { el: h, stats };
}

// time scrubber over steps; the cursor trait round-trips to Python (-1 = follow latest)
function ilScrubber(model, root, onMove) {
  const bar = ilEl("div", "il-scrubber", root);
  const input = ilEl("input", "il-scrub-input", bar);
  input.type = "range"; input.min = 0; input.step = 1;
  const label = ilEl("span", "il-scrub-label", bar);
  const latest = ilEl("button", "il-scrub-latest", bar, "latest");
  const sync = () => {
    const n = model.get("num_steps");
    const c = model.get("cursor");
    const times = ilArr(model, "step_times", Float64Array);
    const k = c < 0 || c >= n ? n - 1 : c;
    input.max = Math.max(n - 1, 0);
    input.value = Math.max(k, 0);
    input.disabled = n === 0;
    label.textContent = n ? `step ${k + 1}/${n} · t = ${ilMs(times[k])}` : "no steps yet";
    latest.disabled = c < 0;
  };
  input.addEventListener("input", () => {
    model.set("cursor", parseInt(input.value, 10)); model.save_changes(); sync(); onMove();
  });
  latest.addEventListener("click", () => {
    model.set("cursor", -1); model.save_changes(); sync(); onMove();
  });
  model.on("change:num_steps", sync); model.on("change:cursor", sync);
  model.on("change:step_times", sync);
  sync();
  return { el: bar };
}

// the step index a view shows and its end time (seconds from t0)
function ilShown(model) {
  const n = model.get("num_steps");
  const c = model.get("cursor");
  const k = c < 0 || c >= n ? n - 1 : c;
  const times = ilArr(model, "step_times", Float64Array);
  return { k, t: k >= 0 ? times[k] : 0, tMax: n ? times[n - 1] : 0, n };
}

// canvas sized to its CSS width with device-pixel scaling
function ilCanvas(canvas, width, height) {
  const dpr = window.devicePixelRatio || 1;
  canvas.width = Math.max(1, Math.floor(width * dpr));
  canvas.height = Math.max(1, Math.floor(height * dpr));
  canvas.style.width = width + "px"; canvas.style.height = height + "px";
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}

// redraw at most once per animation frame; records the last draw time on the element
function ilScheduler(el, draw) {
  let pending = false;
  return () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      const t = performance.now();
      try { draw(); } catch (e) { console.warn("inferlab view draw failed", e); }
      const ms = performance.now() - t;
      el.dataset.drawMs = ms.toFixed(2);
      el.dataset.draws = String((parseInt(el.dataset.draws || "0", 10)) + 1);
    });
  };
}

function ilTooltip(root) {
  const tip = ilEl("div", "il-tooltip", root);
  tip.style.display = "none";
  return {
    show(x, y, text) {
      tip.textContent = text; tip.style.display = "block";
      tip.style.left = (x + 12) + "px"; tip.style.top = (y + 12) + "px";
    },
    hide() { tip.style.display = "none"; },
    el: tip,
  };
}

function ilDrawLanes(ctx, o) {
  // o: {x0, w, y0, h, tMax, tCut, lanes, seg*, fin*, theme, highlight}
  const n = o.lanes.length;
  const lh = n ? Math.max(1, Math.min(14, o.h / n)) : 14;
  const sx = (t) => o.x0 + (o.tMax > 0 ? (t / o.tMax) * o.w : 0);
  const gap = lh > 4 ? 1 : 0;
  for (let i = 0; i < o.segLane.length; i++) {
    const t0 = o.segT0[i];
    if (t0 > o.tCut) continue;
    const t1 = Math.min(o.segT1[i], o.tCut);
    const x = sx(t0), w = Math.max(1, sx(t1) - x);
    ctx.fillStyle = o.theme.kind[o.segKind[i]];
    ctx.fillRect(x, o.y0 + o.segLane[i] * lh + gap, w, lh - 2 * gap);
  }
  ctx.fillStyle = o.theme.fg;
  for (let i = 0; i < o.finLane.length; i++) {
    if (o.finT[i] > o.tCut) continue;
    const x = sx(o.finT[i]);
    ctx.fillStyle = o.finAborted[i] ? o.theme.kind[3] : o.theme.fg;
    ctx.fillRect(x - 1, o.y0 + o.finLane[i] * lh, 2, lh);
  }
  return { lh, sx };
}


// Redraw when JupyterLab switches theme: the canvases read --jp-* colours at draw time, and
// the new theme's stylesheet lands a moment after the body's data-jp-theme-* attributes
// change, so draw at once and twice more shortly after. Returns the disconnect function.
function ilOnThemeChange(redraw) {
  const again = () => { redraw(); setTimeout(redraw, 300); setTimeout(redraw, 1200); };
  const mo = new MutationObserver(again);
  mo.observe(document.body, { attributes: true,
    attributeFilter: ["data-jp-theme-light", "data-jp-theme-name"] });
  return () => mo.disconnect();
}
