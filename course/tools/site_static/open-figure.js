// A tap on a figure opens its image at full size (on a phone the column shrinks every figure; at
// full size its smallest text is at least 8 px, which tests/site/test_site_browser.py measures).
"use strict";
(() => {
  const link = () => {
    for (const img of document.querySelectorAll(".bd-article figure img")) {
      if (img.closest("a")) continue;
      const a = document.createElement("a");
      a.href = img.src;
      a.className = "figure-full-size";
      a.title = "Open the figure at full size";
      img.replaceWith(a);
      a.appendChild(img);
    }
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", link);
  else link();
})();
