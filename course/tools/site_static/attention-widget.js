// Scaled dot-product attention for one query, redrawn as the reader moves its sliders: no
// kernel, no library, no network. A page places it with
//
//   <div class="attention-widget" data-tokens='["the", "cat"]' data-keys='[[1, 0], [0, 1]]'
//        data-values='[[2, 0], [0, 2]]' data-query='[1, 0]' data-divisor="1.41"></div>
//
// one token, key and value per row (every key as long as the query), and the query and the
// divisor the sliders start from. The widget draws one bar per key: the softmax of
// q . k_j / divisor over the keys, with its number, and under them the output, the weighted sum
// of the values. What the div held before (a line for readers without JavaScript) is replaced.
"use strict";
(() => {
  const QUERY_RANGE = { min: -3, max: 3, step: 0.1 };
  const DIVISOR_RANGE = { min: 0.1, max: 8, step: 0.1 };
  let widgets = 0;

  // Stable: the largest score is subtracted first, so no exponential overflows.
  const softmax = (scores) => {
    const top = Math.max(...scores);
    const exps = scores.map((s) => Math.exp(s - top));
    const total = exps.reduce((a, b) => a + b, 0);
    return exps.map((e) => e / total);
  };

  const dot = (a, b) => a.reduce((sum, x, i) => sum + x * b[i], 0);

  const element = (tag, className, text) => {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  };

  const isMatrix = (m, width) => Array.isArray(m) && m.length > 0
    && m.every((row) => Array.isArray(row) && row.length === (width ?? m[0].length)
      && row.every(Number.isFinite));

  const read = (root) => {
    const data = {};
    for (const name of ["tokens", "keys", "values", "query"]) data[name] = JSON.parse(root.dataset[name]);
    data.divisor = Number(root.dataset.divisor || Math.sqrt(data.query.length));
    const n = data.tokens.length;
    if (!isMatrix([data.query]) || !isMatrix(data.keys, data.query.length) || !isMatrix(data.values)
        || data.keys.length !== n || data.values.length !== n || !(data.divisor > 0)) {
      throw new Error("needs as many tokens, keys and values, and keys as long as the query");
    }
    return data;
  };

  // A labelled slider on one line: its name, the range input, the value it is set to.
  const slider = (id, label, range, value, className) => {
    const row = element("div", "aw-slider");
    const name = element("label");
    name.htmlFor = id;
    name.append(...label);
    const input = element("input", className);
    Object.assign(input, { type: "range", id, min: range.min, max: range.max, step: range.step });
    input.value = value;
    const shown = element("output", "aw-setting");
    shown.htmlFor = id;
    row.append(name, input, shown);
    return { row, input, shown };
  };

  // The widget's words, in the language of the page it is on (the Chinese edition's pages are zh-CN).
  const WORDS = {
    en: { legend: "Query q and divisor", divide: "divide by", paper: "The paper divides by \u221Ad", reset: "Reset",
      heads: ["key", "scaled score", "", "weight"], output: "output = [", total: "the weights add up to " },
    zh: { legend: "查询 q 与除数", divide: "除以", paper: "论文除以 \u221Ad", reset: "复原",
      heads: ["键", "缩放后的分数", "", "权重"], output: "输出 = [", total: "权重之和为 " },
  };
  const words = () => (document.documentElement.lang.startsWith("zh") ? WORDS.zh : WORDS.en);

  const build = (root) => {
    const say = words();
    let data;
    try {
      data = read(root);
    } catch (err) {
      console.warn("attention widget: bad data attributes:", err.message);
      return;
    }
    const id = `attention-widget-${++widgets}`;
    const dk = data.query.length;

    const controls = element("fieldset", "aw-controls");
    controls.append(element("legend", "", say.legend));
    const queries = data.query.map((x, i) => {
      const sub = element("sub", "", String(i + 1));
      const range = { ...QUERY_RANGE, min: Math.min(QUERY_RANGE.min, Math.floor(x)),
        max: Math.max(QUERY_RANGE.max, Math.ceil(x)) };
      const s = slider(`${id}-q${i}`, ["q", sub], range, x, "aw-query");
      s.input.dataset.index = i;
      controls.append(s.row);
      return s;
    });
    const divisor = slider(`${id}-divisor`, [say.divide], DIVISOR_RANGE, data.divisor, "aw-divisor");
    controls.append(divisor.row);
    const hint = element("p", "aw-hint");
    hint.append(say.paper, element("sub", "", "k"), ` = ${+Math.sqrt(dk).toFixed(2)}.`);
    const reset = element("button", "aw-reset", say.reset);
    reset.type = "button";
    hint.append(" ", reset);
    controls.append(hint);

    const bars = element("div", "aw-bars");
    for (const text of say.heads) bars.append(element("span", "aw-head", text));
    const rows = data.tokens.map((token, j) => {
      const score = element("span", "aw-score");
      const track = element("span", "aw-track");
      const fill = element("span", "aw-fill");
      track.setAttribute("aria-hidden", "true");
      track.append(fill);
      const weight = element("span", "aw-weight");
      weight.dataset.index = j;
      bars.append(element("span", "aw-token", token), score, track, weight);
      return { score, fill, weight };
    });

    const result = element("p", "aw-result");
    result.setAttribute("aria-live", "polite");
    const outs = data.values[0].map(() => element("span", "aw-out"));
    result.append(say.output);
    outs.forEach((out, i) => result.append(...(i ? [", ", out] : [out])));
    result.append("]");
    const total = element("span", "aw-total");
    result.append(element("br"), say.total, total);

    const redraw = () => {
      const q = queries.map((s) => Number(s.input.value));
      const by = Number(divisor.input.value);
      queries.forEach((s, i) => { s.shown.textContent = q[i].toFixed(1); });
      divisor.shown.textContent = by.toFixed(1);
      const scores = data.keys.map((k) => dot(q, k) / by);
      const weights = softmax(scores);
      rows.forEach((row, j) => {
        row.score.textContent = scores[j].toFixed(2);
        row.fill.style.width = `${(100 * weights[j]).toFixed(2)}%`;
        row.weight.textContent = weights[j].toFixed(3);
      });
      outs.forEach((out, i) => {
        out.textContent = weights.reduce((sum, w, j) => sum + w * data.values[j][i], 0).toFixed(3);
      });
      total.textContent = weights.reduce((a, b) => a + b, 0).toFixed(3);
    };

    reset.addEventListener("click", () => {
      queries.forEach((s, i) => { s.input.value = data.query[i]; });
      divisor.input.value = data.divisor;
      redraw();
    });
    // On each input, not on the fieldset: an input event a script dispatches does not bubble.
    for (const s of [...queries, divisor]) {
      s.input.addEventListener("input", redraw);
      s.input.addEventListener("change", redraw);
    }
    root.replaceChildren(controls, bars, result);
    root.classList.add("aw-ready");
    redraw();
  };

  const start = () => document.querySelectorAll(".attention-widget").forEach(build);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
