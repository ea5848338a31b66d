// A run planned first (spec.state Initialize, no resourceSnapshotIndex, as KubeFleet users write
// it) in real Chromium against the real local fleet: its page shows the plan as Planned with a
// Start run button; a cluster that joins the placement meanwhile is named as not in the run;
// Start run rolls the plan out through the real member agents, and the joined cluster is left
// to the next run.
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
  uniqueName,
  waitFor,
} from '../lib/fleet.js';

let browser;

before(async () => {
  browser = await launchBrowser();
});

// Runs also when a test failed: the placement goes first, so the agents remove its objects.
after(async () => {
  await browser?.close();
  cleanUp();
});

/** Whether member `i` has namespace `ns`. */
function memberHas(i, ns) {
  try {
    kubectl(['get', 'namespace', ns, '-o', 'name'], { kubeconfig: join(FLEET_DIR, `member-${i}.kubeconfig`) });
    return true;
  } catch {
    return false;
  }
}

test('a planned run is shown, started from its page, and names the cluster that joined after it', async () => {
  const name = uniqueName('e2e-plan');
  apply([
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name } },
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'settings', namespace: name }, data: { greeting: 'planned' } },
    {
      apiVersion: 'fleethub.dev/v1alpha1',
      kind: 'StagedUpdateStrategy',
      metadata: { name },
      spec: { stages: [{ name: 'all', labelSelector: {}, maxConcurrency: '100%' }, { name: 'sign-off' }] },
    },
    {
      apiVersion: 'fleethub.dev/v1alpha1',
      kind: 'Placement',
      metadata: { name },
      spec: {
        resourceSelectors: [{ group: '', version: 'v1', kind: 'Namespace', name }],
        policy: { placementType: 'PickFixed', clusterNames: ['member-1', 'member-2'] },
        strategy: { type: 'External' },
      },
    },
  ]);
  await waitFor(`resource snapshot ${name}-0-snapshot`, () => getJson('resourcesnapshot', `${name}-0-snapshot`));
  apply([
    {
      apiVersion: 'fleethub.dev/v1alpha1',
      kind: 'UpdateRun',
      metadata: { name },
      spec: { placementName: name, stagedRolloutStrategyName: name, state: 'Initialize' },
    },
  ]);
  const progressing = () => getJson('updaterun', name)?.status?.conditions?.find((c) => c.type === 'Progressing');
  await waitFor('the hub to plan the run', () => progressing()?.reason === 'UpdateRunNotStarted', 120_000);
  assert.equal(getJson('updaterun', name).status.resourceSnapshotIndexUsed, '0');

  // member-3 joins the placement after the run was planned.
  kubectl(['patch', 'placement', name, '--type=merge', '-p', JSON.stringify({ spec: { policy: { placementType: 'PickFixed', clusterNames: ['member-1', 'member-2', 'member-3'] } } })]);
  await waitFor('the run to count member-3', () => getJson('updaterun', name).status?.clustersNotInRun?.count === 1);

  const page = await browser.context.newPage();
  await signIn(page, 'admin', `/runs/${name}`);
  await page.waitForSelector('h1 .badge');
  assert.match(await page.textContent('h1 .badge'), /Planned/);
  await page.waitForSelector('.notice');
  assert.match(
    await page.textContent('.notice'),
    new RegExp(`1 cluster joined Placement ${name} after this run started \\(member-3\\): start a new run to include them`),
  );
  for (const member of ['member-1', 'member-2']) assert.match(await page.textContent('ol.stages'), new RegExp(member));
  assert.doesNotMatch(await page.textContent('ol.stages'), /member-3/);
  const start = `form[action="/runs/${name}/resume"] button`;
  assert.match(await page.textContent(start), /Start run/);
  await screenshot(page, 'planned-run.png');

  await Promise.all([page.waitForURL((u) => u.pathname === `/runs/${name}`), page.click(start)]);
  assert.equal(getJson('updaterun', name).spec.state, 'Run');
  await waitFor(
    'the run to succeed',
    () => getJson('updaterun', name).status?.conditions?.find((c) => c.type === 'Succeeded')?.status === 'True',
    180_000,
  );
  await page.waitForFunction(() => /Succeeded/.test(document.querySelector('h1 .badge')?.textContent || ''), null, {
    timeout: 30_000,
  });
  assert.ok(memberHas(1, name) && memberHas(2, name), 'the run reached member-1 and member-2');
  assert.ok(!memberHas(3, name), 'member-3 joined after the run started and is not in it');
  await page.close();
});
