// A run page's rows in real Chromium against the real local fleet: each cluster's overrides and
// drift come from its Binding. A run that applies no override over a placement that reports no
// drift says "None" without reading the Bindings; once the placement reports a cluster drifted
// (an edit on the member, left there by `whenToApply: IfNotDrifted`), that cluster's row is
// marked with the edited field; and a run that applies an override names it in each row.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';

import {
  DASHBOARD_URL,
  FLEET_DIR,
  apply,
  cleanUp,
  getJson,
  kubectl,
  launchBrowser,
  screenshot,
  signIn,
  startRun,
  uniqueName,
  waitFor,
} from '../lib/fleet.js';

let browser;

before(async () => {
  browser = await launchBrowser();
});

// Runs also when a test failed: the test's objects go (the placement's removal takes its
// objects off member-2).
after(async () => {
  await browser?.close();
  cleanUp();
});

const member2 = { kubeconfig: join(FLEET_DIR, 'member-2.kubeconfig') };

/** Namespace `name` with ConfigMap `settings`, a one-stage strategy, and a placement of it on member-2. */
function content(name, applyStrategy) {
  apply([
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name } },
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'settings', namespace: name }, data: { greeting: 'hello' } },
    {
      apiVersion: 'fleethub.dev/v1alpha1',
      kind: 'StagedUpdateStrategy',
      metadata: { name },
      spec: { stages: [{ name: 'all', labelSelector: {} }] },
    },
    {
      apiVersion: 'fleethub.dev/v1alpha1',
      kind: 'Placement',
      metadata: { name },
      spec: {
        resourceSelectors: [{ group: '', version: 'v1', kind: 'Namespace', name }],
        policy: { placementType: 'PickFixed', clusterNames: ['member-2'] },
        strategy: { type: 'External', ...(applyStrategy ? { applyStrategy } : {}) },
      },
    },
  ]);
}

/** Runs snapshot 0 of placement `name` and waits until it succeeded. */
async function runToTheEnd(name) {
  await startRun(name);
  await waitFor(
    `run ${name} to succeed`,
    () => getJson('updaterun', name)?.status?.conditions?.find((c) => c.type === 'Succeeded' && c.status === 'True'),
    120_000,
  );
}

/** The text of member-2's row on run `name`'s page, loaded anew. */
async function row(page, name) {
  await page.goto(`${DASHBOARD_URL}/runs/${name}`);
  return page.textContent('li.stage[data-stage="all"] tr[data-cluster="member-2"]');
}

test("a run page marks each cluster's drift and overrides from its Binding", async () => {
  const name = uniqueName('e2e-marks');
  content(name, { whenToApply: 'IfNotDrifted' });
  await runToTheEnd(name);
  assert.deepEqual(getJson('updaterun', name).status.appliedOverrideSnapshots ?? {}, {}, 'the run applies no override');

  const page = await browser.context.newPage();
  await signIn(page, 'admin', `/runs/${name}`);
  const before = await row(page, name);
  assert.match(before, /Succeeded/);
  assert.match(before, /None/, 'no override applies');
  assert.doesNotMatch(before, /Drifted/);

  // Edited on the member by hand: left there (IfNotDrifted), reported on the placement, marked.
  await waitFor('ConfigMap settings on member-2', () =>
    kubectl(['get', 'configmap', 'settings', '-n', name, '-o', 'name'], member2),
  );
  kubectl(['patch', 'configmap', 'settings', '-n', name, '--type', 'merge', '-p', '{"data":{"greeting":"edited"}}'], member2);
  await waitFor('the placement to report member-2 drifted', () => getJson('placement', name)?.status?.driftedClusterCount === 1);
  const marked = await waitFor('the drift mark on the run page', async () => {
    const text = await row(page, name);
    return /Drifted/.test(text) && text;
  });
  assert.match(marked, /data\.greeting/, 'the mark names the edited field');
  await screenshot(page, 'run-drift-mark.png');
  await page.close();
});

test("a run that applies an override names it in each cluster's row", async () => {
  const name = uniqueName('e2e-marks');
  // The override first: the run fixes the newest snapshot of every override when it starts.
  apply([
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name } },
    {
      apiVersion: 'fleethub.dev/v1alpha1',
      kind: 'ResourceOverride',
      metadata: { name: 'cluster-name', namespace: name },
      spec: {
        resourceSelectors: [{ group: '', version: 'v1', kind: 'ConfigMap', name: 'settings' }],
        policy: { overrideRules: [{ jsonPatchOverrides: [{ op: 'add', path: '/data/cluster', value: '${MEMBER-CLUSTER-NAME}' }] }] },
      },
    },
  ]);
  await waitFor('override snapshot cluster-name-0', () =>
    kubectl(['get', 'resourceoverridesnapshot', 'cluster-name-0', '-n', name, '-o', 'name']),
  );
  content(name);
  await runToTheEnd(name);

  const page = await browser.context.newPage();
  await signIn(page, 'admin', `/runs/${name}`);
  const text = await waitFor('the override on the run page', async () => {
    const t = await row(page, name);
    return /Overridden/.test(t) && t;
  });
  assert.match(text, /cluster-name-0/, 'the row names the override snapshot');
  await page.close();
});
