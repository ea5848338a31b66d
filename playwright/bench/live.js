// Change-to-browser latency of the dashboard, measured on demand (not a test):
//   cd playwright && FLEET_DIR=../.fleet node bench/live.js [samples]
// An admin's Fleet page is open in Chromium; a label is set on MemberCluster member-1 with
// kubectl, and the time from kubectl returning to the label showing in the open page (no
// reload: the server-sent event, the page's refetch, the render) is one sample. Prints
// p50 / p99 / max. The label is removed afterwards.
import { DASHBOARD_URL, kubectl, launchBrowser, signIn, waitForLive, waitForMemberRow } from '../lib/fleet.js';

const samples = Number(process.argv[2] || 20);
const KEY = 'fleethub.dev/bench-tick';

const browser = await launchBrowser();
const times = [];
try {
  const page = await browser.context.newPage();
  await signIn(page, 'admin', '/');
  await waitForLive(page);
  await page.evaluate(() => {
    window.__notReloaded = true;
  });
  for (let i = 0; i < samples; i++) {
    const label = `${KEY}=${Date.now().toString(36)}-${i}`;
    kubectl(['label', 'membercluster', 'member-1', label, '--overwrite']);
    const t0 = performance.now();
    await waitForMemberRow(page, 'member-1', label, 30_000);
    times.push(performance.now() - t0);
  }
  if (!(await page.evaluate(() => window.__notReloaded))) throw new Error('the page was reloaded');
} finally {
  kubectl(['label', 'membercluster', 'member-1', `${KEY}-`]);
  await browser.close();
}
times.sort((a, b) => a - b);
const pct = (p) => times[Math.min(times.length - 1, Math.ceil((p / 100) * times.length) - 1)];
console.log(`dashboard change → open browser page (${DASHBOARD_URL}), ${times.length} samples:`);
console.log(`  p50 ${pct(50).toFixed(0)} ms, p99 ${pct(99).toFixed(0)} ms, max ${times.at(-1).toFixed(0)} ms`);
