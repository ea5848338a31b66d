// A metric gate's progress on the run page, live, in real Chromium against the real local fleet:
// the hub queries the fleet's real Prometheus, which scrapes a gauge of the test exporter that
// the test flips. The open page shows the expanded query, the passes climbing 0/3 → 1/3 → 2/3 →
// 3/3 as the checks pass, and the next stage starting, without being reloaded.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';

import {
  apply,
  cleanUp,
  fleetEnv,
  getJson,
  labelMembers,
  launchBrowser,
  screenshot,
  signIn,
  startRun,
  testGauge,
  uniqueName,
  waitFor,
  waitForLive,
} from '../lib/fleet.js';

const THRESHOLD = 3;
const INTERVAL = '3s';

const name = uniqueName('e2e-metric');
const gauge = testGauge('fleethub_e2e_errors', { run: name });
let browser;

// Runs also when the test failed: the gauge, the scenario's objects and the labels go back.
after(async () => {
  await browser?.close();
  await gauge.remove().catch((e) => console.error(`${e.message}`));
  cleanUp();
});

/** The run's first stage's metric check, or undefined. */
function gateStatus(run) {
  return run?.status?.stagesStatus?.[0]?.afterStageTaskStatus?.[0]?.metricCheck;
}

test('the run page shows a metric gate passing check by check, then the next stage starting', async () => {
  // Failing to start with: the gate passes while errors < 0.5.
  await gauge.set(1);
  const tier = 'e2e.fleethub.dev/tier';
  labelMembers({ 'member-1': { [tier]: 'first' }, 'member-2': { [tier]: 'second' } });
  const query = 'fleethub_e2e_errors{run="$run"} < 0.5';
  apply([
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name } },
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'settings', namespace: name }, data: { greeting: name } },
    {
      apiVersion: 'fleethub.dev/v1alpha1',
      kind: 'StagedUpdateStrategy',
      metadata: { name },
      spec: {
        stages: [
          {
            name: 'first',
            labelSelector: { matchLabels: { [tier]: 'first' } },
            afterStageTasks: [
              {
                type: 'MetricCheck',
                metricCheck: { url: fleetEnv().FLEET_PROMETHEUS, query, interval: INTERVAL, successThreshold: THRESHOLD },
              },
            ],
          },
          { name: 'second', labelSelector: { matchLabels: { [tier]: 'second' } } },
        ],
      },
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
  await startRun(name);

  const page = await (browser = await launchBrowser()).context.newPage();
  await signIn(page, 'admin', `/runs/${name}`);
  await waitForLive(page);
  await page.evaluate(() => {
    window.__notReloaded = true;
  });
  const task = 'li.stage[data-stage="first"] [data-task="MetricCheck"]';
  const text = async () => (await page.textContent(task)) ?? '';
  const showing = (pattern, timeout) =>
    page.waitForFunction(
      ([sel, source]) => new RegExp(source).test(document.querySelector(sel)?.textContent || ''),
      [task, pattern.source],
      { timeout, polling: 20 },
    );

  // The first stage's cluster is done; the gate checks and fails, and the page says so.
  await showing(/no data/, 120_000);
  assert.match(await text(), new RegExp(`0/${THRESHOLD} passes`));
  assert.match(await text(), /Checking/);
  assert.ok((await text()).includes(`fleethub_e2e_errors{run="${name}"} < 0.5`), await text());
  assert.equal((await page.textContent('li.stage[data-stage="second"] h2 .badge')).trim(), 'Not started');

  // The metric recovers: each check's pass shows up in the open page, in order.
  await gauge.set(0.1);
  const seenAt = [];
  for (let n = 1; n < THRESHOLD; n++) {
    await showing(new RegExp(`\\b${n}/${THRESHOLD} passes`), 60_000);
    seenAt.push(Date.now());
    assert.match(await text(), /Checking/, `not passed at ${n} passes`);
  }
  await showing(/Passed/, 60_000);
  assert.match(await text(), new RegExp(`${THRESHOLD}/${THRESHOLD} passes`));
  const checks = gateStatus(getJson('updaterun', name));
  assert.equal(checks.consecutivePasses, THRESHOLD);
  assert.equal(checks.lastValue, '0.1');

  // The next stage starts; the page follows without a reload.
  await waitFor(
    'stage second to start on the page',
    async () => ['Updating', 'Waiting', 'Succeeded'].includes((await page.textContent('li.stage[data-stage="second"] h2 .badge')).trim()),
    90_000,
  );
  assert.equal(await page.evaluate(() => window.__notReloaded), true, 'the page was reloaded');
  console.log(`metric gate: passes 1..${THRESHOLD - 1} shown ${seenAt.slice(1).map((t, i) => t - seenAt[i]).join(', ')} ms apart (interval ${INTERVAL})`);
  await screenshot(page, 'metric-gate.png');
  await page.close();
});
