// TokenStream view: one lane per request, one chip per token; spacing = inter-token gap.
const MAX_LANES = 40, MAX_CHIPS = 160;

function shownText(s) {
  if (s === "") return "∅";
  return s.replace(/ /g, "·").replace(/\n/g, "↵").replace(/\t/g, "→");
}

function render({ model, el }) {
  const root = ilEl("div", "il-view il-token-stream", el);
  const head = ilHeader(model, root);
  const lanes = ilEl("div", "il-ts-lanes", root);
  ilScrubber(model, root, () => redraw());
  const draw = () => {
    const reqs = model.get("requests");
    const tr = ilArr(model, "tok_req", Int32Array);
    const ts = ilArr(model, "tok_step", Int32Array);
    const tt = ilArr(model, "tok_time", Float64Array);
    const raw = model.get("tok_text");
    const texts = raw && raw.byteLength ? new TextDecoder().decode(raw).split("\u0000") : [];
    const { k, t } = ilShown(model);
    const per = reqs.map(() => []);
    for (let i = 0; i < tr.length; i++) if (ts[i] <= k) per[tr[i]].push(i);
    let ttftSum = 0, ttftN = 0, total = 0, gapMax = 1e-9;
    per.forEach((idx, r) => {
      total += idx.length;
      if (idx.length) { ttftSum += reqs[r].ttft; ttftN++; }
      for (let j = 1; j < idx.length; j++) gapMax = Math.max(gapMax, tt[idx[j]] - tt[idx[j - 1]]);
    });
    head.stats.textContent = `${reqs.length} requests · ${total} tokens · mean TTFT ` +
      ilMs(ttftN ? ttftSum / ttftN : NaN) + ` · longest gap ${ilMs(gapMax)}`;
    const frag = document.createDocumentFragment();
    const order = reqs.map((_, r) => r).filter((r) => per[r].length || reqs[r].arrival <= t + 1e-9);
    const shown = order.slice(0, MAX_LANES);
    for (const r of shown) {
      const idx = per[r];
      const lane = ilEl("div", "il-ts-lane", frag);
      ilEl("span", "il-ts-id", lane, reqs[r].id);
      const chips = ilEl("div", "il-ts-chips", lane);
      if (!idx.length) { ilEl("span", "il-ts-wait", chips, "waiting…"); continue; }
      const ttft = reqs[r].ttft;
      const bar = ilEl("span", "il-ts-ttft", chips, "TTFT " + ilMs(ttft));
      bar.title = `time to first token ${ilMs(ttft)} (prompt ${reqs[r].prompt_len} tokens)`;
      const start = Math.max(0, idx.length - MAX_CHIPS);
      if (start) ilEl("span", "il-ts-more", chips, `… ${start} earlier`);
      for (let j = start; j < idx.length; j++) {
        const i = idx[j];
        const gap = j ? tt[i] - tt[idx[j - 1]] : 0;
        const chip = ilEl("span", "il-chip", chips, shownText(texts[i] ?? ""));
        if (j) chip.style.marginLeft = (1 + Math.round(14 * Math.sqrt(gap / gapMax))) + "px";
        chip.title = `token #${j} · ${j ? "+" + ilMs(gap) : "TTFT " + ilMs(ttft)} · t=${ilMs(tt[i])} · step ${ts[i]}`;
      }
    }
    if (order.length > MAX_LANES) ilEl("div", "il-ts-more", frag, `+ ${order.length - MAX_LANES} more requests`);
    if (!reqs.length) ilEl("div", "il-ts-more", frag, "no requests yet");
    lanes.replaceChildren(frag);
  };
  const redraw = ilScheduler(root, draw);
  for (const n of ["requests", "tok_req", "tok_text", "cursor", "num_steps"]) model.on("change:" + n, redraw);
  redraw();
  return () => {};
}

export default { render };
