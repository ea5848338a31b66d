// The Auto-updates page in real Chromium against the real local fleet: a policy's open circuit
// shown with its available version, no Reset for a viewer, and an admin's Reset closing the
// circuit on the hub and, live, on open pages.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import {
  DASHBOARD_URL,
  apply,
  cleanUp,
  csrfOf,
  getJson,
  kubectl,
  launchBrowser,
  screenshot,
  signIn,
  uniqueName,
  waitFor,
  waitForLive,
} from '../lib/fleet.js';

const RESET_ANNOTATION = 'fleethub.dev/reset-requested';

// One browser per person: a browser holds one session cookie.
let adminBrowser;
let viewerBrowser;

before(async () => {
  adminBrowser = await launchBrowser();
  viewerBrowser = await launchBrowser();
});

// Runs also when a test failed: the policy goes.
after(async () => {
  await adminBrowser?.close();
  await viewerBrowser?.close();
  cleanUp();
});

function condition(name, type) {
  return getJson('autoupdatepolicy', name)?.status?.conditions?.find((c) => c.type === type);
}

/** Waits (polling every 20 ms) until the policy's circuit badge on an open page reads `label`. */
async function waitForCircuit(page, name, label, timeoutMs = 15_000) {
  await page
    .waitForFunction(
      ([n, l]) => document.querySelector(`section[data-policy="${n}"] [data-field="circuit"]`)?.textContent.trim() === l,
      [name, label],
      { timeout: timeoutMs, polling: 20 },
    )
    .catch((e) => {
      throw new Error(`the page did not show "${label}" for ${name} within ${timeoutMs} ms: ${e.message}`);
    });
}

test('an open circuit is shown with its available version; a viewer sees no Reset; an admin resets it and open pages show it closed, live', async () => {
  // A policy whose placement does not exist: the hub only reports Ready=False for it, so
  // nothing rolls out, and its circuit can be opened by hand below.
  const name = uniqueName('e2e-aup');
  apply([
    {
      apiVersion: 'fleethub.dev/v1alpha1',
      kind: 'AutoUpdatePolicy',
      metadata: { name },
      spec: {
        placementName: `${name}-missing`,
        target: { kind: 'Deployment', namespace: name, name: 'web', container: 'web' },
        schedule: '0 0 1 1 *',
        versionConstraint: '>=1.0.0, <2',
        stagedRolloutStrategyName: `${name}-missing`,
        maxRollbacks: 3,
      },
    },
  ]);
  await waitFor(`the hub to report on AutoUpdatePolicy ${name}`, () => condition(name, 'Ready')?.status === 'False', 60_000);

  const admin = await adminBrowser.context.newPage();
  await signIn(admin, 'admin', '/autoupdates');
  await waitForLive(admin);
  const viewer = await viewerBrowser.context.newPage();
  await signIn(viewer, 'viewer', '/autoupdates');
  await waitForLive(viewer);
  for (const page of [admin, viewer]) {
    await waitForCircuit(page, name, 'Circuit closed');
    await page.evaluate(() => {
      window.__notReloaded = true;
    });
  }
  assert.match(await admin.textContent(`section[data-policy="${name}"] h2`), /Not ready/);

  // Stands in for three consecutive rollbacks of broken versions (which the hub's own tests
  // produce with real rollouts): the status a third rollback leaves, with a newer version
  // found but not applied. The hub keeps these fields for a policy it cannot act on.
  kubectl([
    'patch', 'autoupdatepolicy', name, '--subresource=status', '--type=merge', '-p',
    JSON.stringify({
      status: { circuitOpen: true, rollbackCount: 3, availableVersion: '1.5.0', failedVersions: ['1.2.0', '1.3.0', '1.4.0'] },
    }),
  ]);
  for (const page of [admin, viewer]) {
    await waitForCircuit(page, name, 'Circuit open');
    const card = `section[data-policy="${name}"]`;
    assert.equal((await page.textContent(`${card} [data-field="available"]`)).trim(), '1.5.0');
    assert.match(await page.textContent(`${card} [data-field="circuit-detail"]`), /open · rollbacks 3 of 3/);
    assert.equal((await page.textContent(`${card} [data-field="failed-versions"]`)).trim(), '1.2.0, 1.3.0, 1.4.0');
    assert.equal(await page.evaluate(() => window.__notReloaded), true, 'the page was reloaded');
  }

  // The viewer has no buttons, and a hand-made POST with the viewer's own session and CSRF
  // token is refused by the hub's RBAC, with nothing changed.
  assert.equal(await viewer.locator(`section[data-policy="${name}"] form`).count(), 0);
  const csrf = await csrfOf(viewer);
  assert.ok(csrf);
  const forged = await viewer.request.post(`${DASHBOARD_URL}/autoupdates/${name}/reset`, {
    form: { csrf },
    maxRedirects: 0,
  });
  assert.equal(forged.status(), 403);
  assert.match(await forged.text(), /You are not allowed to reset the circuit of/);
  assert.equal(getJson('autoupdatepolicy', name).metadata.annotations?.[RESET_ANNOTATION], undefined);
  await screenshot(admin, 'autoupdates-open.png');

  // The admin resets: the request is recorded as the admin's dashboard write, the hub closes
  // the circuit, and both open pages show it (the viewer's without any navigation).
  const reset = `section[data-policy="${name}"] form[action="/autoupdates/${name}/reset"] button`;
  // The page is /autoupdates already: the redirect is told apart by the policy's anchor.
  await Promise.all([admin.waitForURL((u) => u.pathname === '/autoupdates' && u.hash === `#policy-${name}`), admin.click(reset)]);
  const asked = JSON.parse(kubectl(['get', 'autoupdatepolicy', name, '-o', 'json', '--show-managed-fields']));
  const value = asked.metadata.annotations?.[RESET_ANNOTATION];
  assert.ok(value, 'no reset request on the policy');
  const writer = asked.metadata.managedFields.find((f) =>
    JSON.stringify(f.fieldsV1 || {}).includes(`f:${RESET_ANNOTATION}`));
  assert.equal(writer?.manager, 'fleethub/dashboard');
  await waitFor('the hub to close the circuit', () => {
    const s = getJson('autoupdatepolicy', name).status;
    return s.observedResetRequest === value && !s.circuitOpen && s.rollbackCount === 0;
  });
  for (const page of [admin, viewer]) {
    await waitForCircuit(page, name, 'Circuit closed');
    assert.match(await page.textContent(`section[data-policy="${name}"] [data-field="circuit-detail"]`), /closed · rollbacks 0 of 3/);
  }
  assert.equal(await viewer.evaluate(() => window.__notReloaded), true, "the viewer's page was reloaded");
  assert.equal(condition(name, 'CircuitOpen')?.reason, 'CircuitReset');
  // Nothing left to reset: the admin's button is gone; Check now stays.
  await admin.waitForSelector(reset, { state: 'detached' });
  assert.equal(await admin.locator(`section[data-policy="${name}"] button[data-action="check"]`).count(), 1);
  await screenshot(admin, 'autoupdates-reset.png');
  await admin.close();
  await viewer.close();
});
