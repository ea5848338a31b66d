// A run over 120 clusters in real Chromium against the real local fleet: the hub stores its
// stage compact (counts by state; the names in order in its UpdateRunPlan), and the run's page
// shows the stage's counts, pages its clusters 50 at a time and finds them by name. The 120
// MemberClusters have no agent (their Joined condition is written here), so the run is only
// planned (spec.state Initialize): nothing is sent to them.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { apply, cleanUp, getJson, kubectl, launchBrowser, screenshot, signIn, uniqueName, waitFor } from '../lib/fleet.js';

const CLUSTERS = 120;

let browser;

before(async () => {
  browser = await launchBrowser();
});

// Runs also when a test failed: the run and placement go first, then the MemberClusters.
after(async () => {
  await browser?.close();
  cleanUp();
});

test('a 120-cluster stage is stored compact, and its page shows counts, pages and finds clusters', async () => {
  const name = uniqueName('e2e-big');
  const member = (i) => `${name}-${String(i).padStart(3, '0')}`;
  const members = Array.from({ length: CLUSTERS }, (_, i) => member(i + 1));
  apply(
    members.map((m) => ({
      apiVersion: 'fleethub.dev/v1alpha1',
      kind: 'MemberCluster',
      metadata: { name: m, labels: { [name]: 'yes' } },
      spec: { heartbeatPeriodSeconds: 60 },
    })),
  );
  // Joined as an agent would say it, so that the placement selects them.
  const joined = JSON.stringify({
    status: {
      conditions: [
        { type: 'Joined', status: 'True', reason: 'AgentJoined', message: 'written by the test', lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z') },
      ],
    },
  });
  for (const m of members) kubectl(['patch', 'membercluster', m, '--subresource=status', '--type=merge', '-p', joined]);
  apply([
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name } },
    {
      apiVersion: 'fleethub.dev/v1alpha1',
      kind: 'StagedUpdateStrategy',
      metadata: { name },
      spec: { stages: [{ name: 'edge', labelSelector: {}, maxConcurrency: '25%' }] },
    },
    {
      apiVersion: 'fleethub.dev/v1alpha1',
      kind: 'Placement',
      metadata: { name },
      spec: {
        resourceSelectors: [{ group: '', version: 'v1', kind: 'Namespace', name }],
        policy: { placementType: 'PickAll', clusterSelector: { matchLabels: { [name]: 'yes' } } },
        strategy: { type: 'External' },
      },
    },
  ]);
  await waitFor(`resource snapshot ${name}-0-snapshot`, () => getJson('resourcesnapshot', `${name}-0-snapshot`));
  await waitFor(`${CLUSTERS} bindings`, () => {
    const list = JSON.parse(kubectl(['get', 'bindings.fleethub.dev', '-l', `fleethub.dev/placement=${name}`, '-o', 'json']));
    return list.items.length === CLUSTERS;
  });
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

  // Stored compact: the counts and no per-cluster entries yet in the run's status; the plan,
  // the names in order (one comma-separated string), in the run's UpdateRunPlan, written once.
  const status = getJson('updaterun', name).status;
  const stage = status.stagesStatus[0];
  assert.equal(stage.clustersInPlan, true);
  assert.equal(stage.clusterNameList, undefined);
  assert.deepEqual(stage.clusterCounts, { total: CLUSTERS, pending: CLUSTERS, updating: 0, succeeded: 0, failed: 0, skipped: 0 });
  assert.deepEqual(stage.clusters, []);
  const plan = getJson('updaterunplan', name);
  assert.equal(status.planRef.uid, plan.metadata.uid);
  assert.deepEqual(plan.spec.stages, [{ stageName: 'edge', clusterNameList: members.join(',') }]);

  const page = await browser.context.newPage();
  await signIn(page, 'admin', `/runs/${name}`);
  const card = 'li.stage[data-stage="edge"]';
  await page.waitForSelector(`${card} details.clusters > summary`);
  assert.match(await page.textContent(`${card} summary`), /120 clusters: 120 pending/);
  if (!(await page.$eval(`${card} details.clusters`, (d) => d.open))) await page.click(`${card} summary`);
  const rows = async () => page.$$eval(`${card} tbody tr`, (trs) => trs.map((tr) => [tr.cells[0].textContent.trim(), tr.dataset.cluster]));

  let shown = await rows();
  assert.equal(shown.length, 50);
  assert.deepEqual(shown[0], ['1', member(1)]);
  assert.match(await page.textContent(`${card} .pager`), /Clusters 1–50 of 120/);
  await screenshot(page, 'large-run.png');

  // Next: clusters 51–100, then 101–120 and no further page.
  await Promise.all([page.waitForURL((u) => u.searchParams.get('page') === '1'), page.click(`${card} .pager a[rel=next]`)]);
  await page.waitForSelector(`${card} tr[data-cluster="${member(51)}"]`);
  shown = await rows();
  assert.deepEqual([shown.length, shown[0], shown[49]], [50, ['51', member(51)], ['100', member(100)]]);
  await Promise.all([page.waitForURL((u) => u.searchParams.get('page') === '2'), page.click(`${card} .pager a[rel=next]`)]);
  await page.waitForSelector(`${card} tr[data-cluster="${member(101)}"]`);
  shown = await rows();
  assert.deepEqual([shown.length, shown[19]], [20, ['120', member(120)]]);
  assert.equal(await page.$(`${card} .pager a[rel=next]`), null, 'no page after the last');

  // Find by name: the ten clusters 110–119, numbered by their place in the stage.
  await page.fill('form.search input[name=q]', `${name}-11`);
  await Promise.all([page.waitForURL((u) => u.searchParams.get('q') === `${name}-11`), page.click('form.search button')]);
  await page.waitForSelector(`${card} tr[data-cluster="${member(110)}"]`);
  shown = await rows();
  assert.deepEqual(
    shown.map((r) => r[0]),
    ['110', '111', '112', '113', '114', '115', '116', '117', '118', '119'],
  );
  assert.match(await page.textContent(`${card} summary`), /\(10 matching/);
  assert.equal(await page.$(`${card} .pager`), null, 'ten matches fit one page');
  await page.close();
});
