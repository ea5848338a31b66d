// Per-cluster overrides in real Chromium against the real local fleet: the Placements page
// names each cluster's overrides, and its link opens the page of what that cluster gets (the
// diff against the hub's template, rendered on the server like `kubectl fleet render`).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import {
  DASHBOARD_URL,
  apply,
  cleanUp,
  getJson,
  kubectl,
  launchBrowser,
  screenshot,
  signIn,
  uniqueName,
  waitFor,
} from '../lib/fleet.js';

let browser;

before(async () => {
  browser = await launchBrowser();
});

// Runs also when a test failed: the test's objects go.
after(async () => {
  await browser?.close();
  cleanUp();
});

test("each cluster's overrides are named and link to the diff of what it gets", async () => {
  const name = uniqueName('e2e-overrides');
  // The override first, then a RollingUpdate placement: every cluster's first Work has it.
  apply([
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name } },
    {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'settings', namespace: name },
      data: { greeting: 'hello' },
    },
    {
      apiVersion: 'fleethub.dev/v1alpha1',
      kind: 'ResourceOverride',
      metadata: { name: 'cluster-name', namespace: name },
      spec: {
        resourceSelectors: [{ group: '', version: 'v1', kind: 'ConfigMap', name: 'settings' }],
        policy: {
          overrideRules: [
            { jsonPatchOverrides: [{ op: 'add', path: '/data/cluster', value: '${MEMBER-CLUSTER-NAME}' }] },
          ],
        },
      },
    },
  ]);
  // kubectl throws while the snapshot does not exist yet; waitFor retries.
  await waitFor('override snapshot cluster-name-0', () =>
    kubectl(['get', 'resourceoverridesnapshot', 'cluster-name-0', '-n', name, '-o', 'name']),
  );
  apply([
    {
      apiVersion: 'fleethub.dev/v1alpha1',
      kind: 'Placement',
      metadata: { name },
      spec: {
        resourceSelectors: [{ group: '', version: 'v1', kind: 'Namespace', name }],
        policy: { placementType: 'PickFixed', clusterNames: ['member-2'] },
        strategy: { type: 'RollingUpdate' },
      },
    },
  ]);
  await waitFor(
    "member-2's Overridden condition",
    () =>
      getJson('bindings.fleethub.dev', `${name}-member-2`)?.status?.conditions?.find(
        (c) => c.type === 'Overridden' && c.reason === 'OverriddenSucceeded',
      ),
    120_000,
  );

  const page = await browser.context.newPage();
  await signIn(page, 'viewer', '/placements');
  const row = `section[data-placement="${name}"] tr[data-cluster="member-2"]`;
  await page.waitForSelector(`${row} .overrides[data-overrides="Overridden"]`, { timeout: 30_000 });
  assert.match(await page.textContent(`${row} .overrides`), /cluster-name-0/);
  await screenshot(page, 'placements-overrides.png');

  await Promise.all([page.waitForURL(/\/render$/), page.click(`${row} .overrides a`)]);
  assert.equal(new URL(page.url()).pathname, `/placements/${name}/clusters/member-2/render`);
  assert.equal(await page.textContent('h1'), `What member-2 gets from ${name}`);
  assert.equal(await page.textContent('pre.diff .add'), '+  cluster: member-2');
  const manifests = await page.textContent('pre.manifests');
  assert.match(manifests, /cluster: member-2/);
  // The override itself stays on the hub.
  assert.doesNotMatch(manifests, /kind: ResourceOverride/);
  await screenshot(page, 'render-page.png');

  // A cluster the placement does not know is named, not a blank page.
  const missing = await page.goto(`${DASHBOARD_URL}/placements/${name}/clusters/no-such-member/render`);
  assert.equal(missing.status(), 404);
  assert.match(await page.textContent('.error'), /membercluster no-such-member not found/);
  await page.close();
});
