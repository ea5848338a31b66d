// Approves one stage gate of a run by clicking in real Chromium, as a person does: signs in to
// the dashboard at DASHBOARD_URL with the token in APPROVER_TOKEN, opens the run's page, clicks
// the stage's Approve link and confirms. Used by tests whose dashboard is not the process one
// (hub/tests/in_cluster.rs: the dashboard running as pods, reached through kubectl
// port-forward).
//
//   DASHBOARD_URL=http://127.0.0.1:PORT APPROVER_TOKEN=... node approve-in-browser.js RUN STAGE GATE
//
// Exits 0 once the dashboard is back on the run's page after the approval; 1, with the reason
// and a screenshot in playwright/artifacts, otherwise.

import { DASHBOARD_URL, launchBrowser, screenshot, signInWithToken } from './fleet.js';

const [run, stage, gate] = process.argv.slice(2);
const bearer = process.env.APPROVER_TOKEN;
if (!run || !stage || !gate || !bearer) {
  console.error('usage: DASHBOARD_URL=… APPROVER_TOKEN=… node approve-in-browser.js RUN STAGE GATE');
  process.exit(2);
}

const browser = await launchBrowser();
const page = await browser.context.newPage();
try {
  await signInWithToken(page, bearer, `/runs/${run}`);
  const link = `li.stage[data-stage="${stage}"] a[href="/approvals/${gate}/approve"]`;
  await page.waitForSelector(link, { timeout: 60_000 });
  await page.click(link);
  await page.waitForURL(`${DASHBOARD_URL}/approvals/${gate}/approve`);
  await Promise.all([page.waitForURL(`${DASHBOARD_URL}/runs/${run}`), page.click('#confirm-approve')]);
  console.log(`approved ${gate} in Chromium at ${DASHBOARD_URL}`);
} catch (e) {
  await screenshot(page, `approve-in-browser-${gate}.png`).catch(() => {});
  console.error(`approving ${gate} in Chromium at ${DASHBOARD_URL} failed: ${e.message}`);
  process.exitCode = 1;
} finally {
  await browser.close();
}
