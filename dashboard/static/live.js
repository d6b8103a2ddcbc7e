// Live updates by a short poll (every 2 s): /api/pulse returns a fingerprint of the runs in
// progress, the newest run and the routines' on/off state; when it changes, the overview's
// live section is fetched again from the server and swapped in. No inline script, no library.
"use strict";
(function () {
  const live = document.getElementById("live");
  if (!live) return;
  const pulseUrl = live.dataset.pulse;
  const partialUrl = live.dataset.partial;
  // The pulse the page was drawn at: a change since (a run that started as it rendered)
  // refreshes it at the first tick instead of becoming the baseline.
  let last = live.dataset.at || null;
  async function tick() {
    try {
      const r = await fetch(pulseUrl, { credentials: "same-origin", cache: "no-store" });
      if (r.ok) {
        const { pulse } = await r.json();
        if (last !== null && pulse !== last) {
          const page = await fetch(partialUrl, { credentials: "same-origin", cache: "no-store" });
          // Server-rendered by the same templates, every untrusted string already escaped.
          if (page.ok) live.innerHTML = await page.text();
        }
        last = pulse;
      }
    } catch (e) {
      // The dashboard restarting: keep polling.
    }
    setTimeout(tick, 2000);
  }
  tick();
})();
