// The dashboard in real Chromium against the real local fleet (hub, agents, dashboard running).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import {
  DASHBOARD_URL,
  approvalCondition,
  approveWithKubectl,
  cleanUp,
  createApprovalScenario,
  csrfOf,
  getJson,
  kubectl,
  launchBrowser,
  screenshot,
  signIn,
  track,
  waitFor,
  waitForLive,
  waitForMemberRow,
} from '../lib/fleet.js';

let browser;

before(async () => {
  browser = await launchBrowser();
});

// Runs also when a test failed: the scenarios' objects go, the members' labels come back.
after(async () => {
  await browser?.close();
  cleanUp();
});

async function scenario(prefix) {
  return createApprovalScenario(prefix);
}

/** The state label of stage `stage` on an open run page. */
function stageState(page, stage) {
  return page.textContent(`li.stage[data-stage="${stage}"] h2 .badge`);
}

test('admin approves a gate in the browser: the run advances and the hub has Approved=True', async () => {
  const s = await scenario('e2e-approve');
  const page = await browser.context.newPage();
  await signIn(page, 'admin', `/runs/${s.run}`);
  await page.waitForSelector(`li.stage[data-stage="first"] [data-task="Approval"] .badge`);
  assert.match(await page.textContent('li.stage[data-stage="first"] [data-task="Approval"]'), /Waiting for approval/);
  assert.equal((await stageState(page, 'second')).trim(), 'Not started');

  await page.click(`li.stage[data-stage="first"] a[href="/approvals/${s.gates.first}/approve"]`);
  await page.waitForURL(`${DASHBOARD_URL}/approvals/${s.gates.first}/approve`);
  assert.match(await page.textContent('form.confirm'), /Approve stage first of run/);
  await Promise.all([page.waitForURL(`${DASHBOARD_URL}/runs/${s.run}`), page.click('#confirm-approve')]);

  const approved = approvalCondition(s.gates.first);
  assert.equal(approved?.status, 'True');
  assert.match(approved.message, /^approved by system:serviceaccount:fleethub-dashboard:fleet-admin/);

  // The run moves on to stage `second` (its cluster updates, then it waits at the next gate),
  // and the open page shows it.
  await waitFor('stage second to start on the page', async () =>
    ['Updating', 'Waiting', 'Succeeded'].includes((await stageState(page, 'second')).trim()), 90_000);
  assert.match(await page.textContent('li.stage[data-stage="first"] [data-task="Approval"]'), /Approved\s*by system:serviceaccount/);
  await screenshot(page, 'run-page.png');
  await page.close();
});

test('an approval made with kubectl appears in an open page without reloading', async () => {
  const s = await scenario('e2e-live');
  const page = await browser.context.newPage();
  await signIn(page, 'admin', `/runs/${s.run}`);
  await waitForLive(page);
  await page.evaluate(() => {
    window.__notReloaded = true;
  });
  const task = `li.stage[data-stage="first"] [data-task="Approval"]`;
  assert.match(await page.textContent(task), /Waiting for approval/);

  const t0 = Date.now();
  approveWithKubectl(s.gates.first, 'ship it');
  await page.waitForFunction(
    (sel) => /Approved/.test(document.querySelector(sel)?.textContent || ''),
    task,
    { timeout: 10_000, polling: 20 },
  );
  console.log(`live update: kubectl approval visible in the open page ${Date.now() - t0} ms after the patch returned`);
  assert.equal(await page.evaluate(() => window.__notReloaded), true, 'the page was reloaded');

  // The Fleet page follows member changes too (a label set with kubectl).
  await page.goto(`${DASHBOARD_URL}/`);
  await page.waitForSelector('#fleet tbody tr');
  await waitForLive(page);
  const label = `e2e.fleethub.dev/seen=${s.name}`;
  kubectl(['label', 'membercluster', 'member-1', label, '--overwrite']);
  try {
    await waitForMemberRow(page, 'member-1', label);
  } finally {
    kubectl(['label', 'membercluster', 'member-1', 'e2e.fleethub.dev/seen-']);
  }
  await screenshot(page, 'fleet-page.png');
  await page.close();
});

test('a viewer sees no approve button, and a forged approve is refused with nothing changed', async () => {
  const s = await scenario('e2e-viewer');
  const page = await browser.context.newPage();
  await signIn(page, 'viewer', `/runs/${s.run}`);
  const task = `li.stage[data-stage="first"] [data-task="Approval"]`;
  await page.waitForSelector(task);
  assert.match(await page.textContent(task), /Waiting for approval/);
  assert.equal(await page.locator('a[href$="/approve"]').count(), 0);
  await page.goto(`${DASHBOARD_URL}/approvals`);
  await page.waitForSelector(`tr[data-approval="${s.gates.first}"]`);
  assert.equal(await page.locator('a[href$="/approve"]').count(), 0);

  // A hand-made POST with the viewer's valid session and CSRF token: the hub's RBAC refuses.
  const csrf = await csrfOf(page);
  assert.ok(csrf);
  const res = await page.request.post(`${DASHBOARD_URL}/approvals/${s.gates.first}/approve`, {
    form: { csrf, message: 'forged' },
    maxRedirects: 0,
  });
  assert.equal(res.status(), 403);
  assert.match(await res.text(), /You are not allowed to approve/);
  assert.equal(approvalCondition(s.gates.first), undefined, 'the ApprovalRequest changed');
  await page.close();
});

test('no session goes to sign-in, a bad token is explained, a POST without CSRF token is refused', async () => {
  const s = await scenario('e2e-csrf');
  const { context } = browser;
  await context.clearCookies();
  const page = await context.newPage();
  await page.goto(`${DASHBOARD_URL}/runs/${s.run}`);
  assert.equal(new URL(page.url()).pathname, '/login');

  await page.fill('#token', 'not-a-real-token');
  await page.click('button[type=submit]');
  await page.waitForSelector('.error');
  assert.match(await page.textContent('.error'), /did not accept this token/);

  await signIn(page, 'admin', `/runs/${s.run}`);
  const res = await page.request.post(`${DASHBOARD_URL}/approvals/${s.gates.first}/approve`, {
    form: { message: 'no csrf token' },
    maxRedirects: 0,
  });
  assert.equal(res.status(), 403);
  assert.match(await res.text(), /security token is missing or wrong/);
  assert.equal(approvalCondition(s.gates.first), undefined, 'the ApprovalRequest changed');
  assert.ok(getJson('updaterun', s.run));
  await page.close();
});

test('admin stops, resumes, starts and rolls back runs in the browser; pages carry their content without JavaScript', async () => {
  const s = await scenario('e2e-actions');
  const page = await browser.context.newPage();
  await signIn(page, 'admin', `/runs/${s.run}`);
  const click = (selector, path) =>
    Promise.all([page.waitForURL((u) => u.pathname === path), page.click(selector)]);

  // Stop: the run's spec says so, the hub stops it, the page offers Resume.
  await click(`form[action="/runs/${s.run}/stop"] button`, `/runs/${s.run}`);
  assert.equal(getJson('updaterun', s.run).spec.state, 'Stop');
  await waitFor('the hub to stop the run', () =>
    getJson('updaterun', s.run).status?.conditions?.find((c) => c.type === 'Progressing')?.reason === 'UpdateRunStopped');
  await page.waitForSelector(`form[action="/runs/${s.run}/resume"] button`);
  assert.match(await page.textContent('h1 .badge'), /Stopped/);
  await click(`form[action="/runs/${s.run}/resume"] button`, `/runs/${s.run}`);
  assert.notEqual(getJson('updaterun', s.run).spec.state, 'Stop');
  await page.waitForSelector(`form[action="/runs/${s.run}/stop"] button`);

  // A change on the hub cuts snapshot 1; start a run of it from the Placements page.
  kubectl(['-n', s.name, 'patch', 'configmap', 'settings', '--type=merge', '-p', '{"data":{"greeting":"v2"}}']);
  await waitFor('snapshot 1', () => getJson('resourcesnapshot', `${s.name}-1-snapshot`));
  await page.goto(`${DASHBOARD_URL}/placements`);
  const card = `section[data-placement="${s.name}"]`;
  await page.waitForSelector(`${card} select[name=index] option[value="1"]`, { state: 'attached' });
  await page.selectOption(`${card} select[name=index]`, '1');
  await Promise.all([page.waitForURL((u) => u.pathname.startsWith('/runs/')), page.click(`${card} button.primary`)]);
  const started = new URL(page.url()).pathname.split('/')[2];
  const startedRun = getJson('updaterun', started);
  assert.equal(startedRun.spec.placementName, s.name);
  assert.equal(startedRun.spec.resourceSnapshotIndex, '1');
  assert.equal(startedRun.spec.stagedRolloutStrategyName, s.name);
  track('updaterun', started);
  // It supersedes the stopped-and-resumed run, which waited at its gate.
  await waitFor('the older run to be superseded', () =>
    getJson('updaterun', s.run).status?.conditions?.find((c) => c.type === 'Succeeded')?.reason === 'UpdateRunSuperseded');

  // One click rolls the placement back to the snapshot before the newest run's.
  await page.goto(`${DASHBOARD_URL}/placements`);
  const rollback = `${card} button.warn`;
  await page.waitForSelector(rollback);
  assert.match(await page.textContent(rollback), /Roll back to snapshot 0/);
  await screenshot(page, 'placements-page.png');
  await Promise.all([page.waitForURL((u) => u.pathname.startsWith('/runs/') && !u.pathname.endsWith(started)), page.click(rollback)]);
  const back = getJson('updaterun', new URL(page.url()).pathname.split('/')[2]);
  track('updaterun', back.metadata.name);
  assert.equal(back.spec.resourceSnapshotIndex, '0');
  assert.equal(back.spec.placementName, s.name);

  // Every page is complete HTML from the server: what it shows is there before any script runs.
  const html = async (path) => {
    const res = await page.request.get(`${DASHBOARD_URL}${path}`);
    assert.equal(res.status(), 200, path);
    return res.text();
  };
  assert.match(await html('/'), /member-1[\s\S]*member-2[\s\S]*member-3/);
  assert.match(await html('/placements'), new RegExp(`data-placement="${s.name}"`));
  assert.match(await html('/runs'), new RegExp(`data-run="${started}"`));
  const runPage = await html(`/runs/${back.metadata.name}`);
  for (const stage of ['first', 'second', 'rest']) assert.match(runPage, new RegExp(`data-stage="${stage}"`));
  await page.goto(`${DASHBOARD_URL}/approvals`);
  await page.waitForSelector('h1');
  await screenshot(page, 'approvals-page.png');
  await page.close();
});
