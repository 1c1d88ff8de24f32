// Typeset the formulas in search results. Sphinx adds results after MathJax has run, as plain
// text: a section title arrives as "Why divide by \sqrt{d_k}" (its delimiters lost) and a
// summary is 240 characters cut out of a page, which can cut a formula in half.
"use strict";
(() => {
  const typeset = (element) => {
    if (window.MathJax && MathJax.typesetPromise) {
      MathJax.typesetPromise([element]).catch((err) => console.warn("MathJax:", err));
    }
  };

  // A summary keeps only whole formulas: a piece before the first "\(" that closes one
  // and a piece after the last one that never closes are cut off.
  const wholeFormulas = (text) => {
    let start = 0, end = text.length;
    for (const [open, close] of [["\\(", "\\)"], ["\\[", "\\]"]]) {
      const firstClose = text.indexOf(close), firstOpen = text.indexOf(open);
      if (firstClose !== -1 && (firstOpen === -1 || firstClose < firstOpen)) start = Math.max(start, firstClose + close.length);
      const lastOpen = text.lastIndexOf(open);
      if (lastOpen !== -1 && text.indexOf(close, lastOpen) === -1) end = Math.min(end, lastOpen);
    }
    return (start > 0 ? "…" : "") + text.slice(start, Math.max(start, end)) + (end < text.length ? "…" : "");
  };

  const textNodes = (root) => {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
      acceptNode: (n) => (n.parentElement.closest("mjx-container") ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT),
    });
    const found = [];
    while (walker.nextNode()) found.push(walker.currentNode);
    return found;
  };

  // Sphinx marks the search terms with <span class="highlighted">, also inside a formula, where
  // the span splits the TeX and MathJax no longer sees it. So: plain text, formulas typeset,
  // then the terms marked again in the text around them.
  const terms = (new URLSearchParams(window.location.search).get("q") || "")
    .toLowerCase().split(/\s+/).filter((t) => t.length > 1);
  const highlight = (root) => {
    for (const node of textNodes(root)) {
      const lower = node.textContent.toLowerCase();
      const term = terms.find((t) => lower.includes(t));
      if (!term) continue;
      const at = lower.indexOf(term);
      const word = node.splitText(at);
      word.splitText(term.length);
      const span = document.createElement("span");
      span.className = "highlighted";
      word.replaceWith(span);
      span.append(word);
    }
  };

  const fixSummary = (summary) => {
    if (summary.dataset.mathDone || !summary.textContent.includes("\\")) return;
    summary.dataset.mathDone = "1";
    summary.textContent = wholeFormulas(summary.textContent);
    if (window.MathJax && MathJax.typesetPromise) {
      MathJax.typesetPromise([summary]).then(() => highlight(summary)).catch((err) => console.warn("MathJax:", err));
    }
  };

  // A title with TeX in it is replaced by the heading as its page shows it.
  const pages = new Map();
  const headingOf = async (link) => {
    const url = new URL(link.href, document.baseURI);
    const page = url.href.split("#")[0];
    if (!pages.has(page)) {
      pages.set(page, fetch(page).then((r) => r.text()).then((html) => new DOMParser().parseFromString(html, "text/html")));
    }
    const doc = await pages.get(page);
    const target = url.hash ? doc.getElementById(decodeURIComponent(url.hash.slice(1))) : doc.querySelector("h1");
    const heading = target && (target.matches("h1, h2, h3, h4, h5, h6") ? target : target.querySelector("h1, h2, h3, h4, h5, h6"));
    if (!heading) return null;
    const copy = heading.cloneNode(true);
    copy.querySelectorAll(".headerlink").forEach((a) => a.remove());
    return copy.innerHTML;
  };

  const fixItem = async (item) => {
    if (item.dataset.mathDone) return;
    item.dataset.mathDone = "1";
    const link = item.querySelector("a");
    if (link && link.textContent.includes("\\")) {
      const html = await headingOf(link).catch(() => null);
      if (html) {
        const prefix = link.textContent.includes(" > ") ? link.textContent.split(" > ")[0] + " > " : "";
        link.innerHTML = "";
        link.append(document.createTextNode(prefix));
        link.insertAdjacentHTML("beforeend", html);
      }
    }
    if (link) typeset(link);
  };

  const watch = (results) => {
    new MutationObserver(() => {
      results.querySelectorAll("ul.search > li").forEach(fixItem);
      results.querySelectorAll("p.context").forEach(fixSummary);
    }).observe(results, { childList: true, subtree: true });
  };

  const start = () => {
    const results = document.getElementById("search-results");
    if (results) watch(results);
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
