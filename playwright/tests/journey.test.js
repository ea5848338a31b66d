// The staged-deploy journey end to end, on the real local fleet: real hub, real member agents on
// member-1..3 (each a real API server with kwok nodes), real kubectl, real Chromium.
//
// Members are labelled environment=staging|canary|production (production with an integer
// `order`). A Placement selects a hub namespace with a Deployment and a ConfigMap; the strategy
// is staging → TimedWait, canary → Approval, production (by `order`) → Approval + TimedWait.
// Version 1 is rolled out; then the Deployment's image changes on the hub, a new snapshot is
// cut, and a run rolls it out: the canary gate is approved with `kubectl patch
// --subresource=status`, the production gate in the dashboard. Each member runs the new image
// only after the gates before it passed, in the strategy's order, and the run ends Succeeded
// with a complete status. A run pointing at the previous snapshot brings the old image back.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';

import {
  DASHBOARD_URL,
  FLEET_DIR,
  apply,
  approvalCondition,
  approveWithKubectl,
  cleanUp,
  getJson,
  kubectl,
  labelMembers,
  launchBrowser,
  screenshot,
  signIn,
  uniqueName,
  waitFor,
} from '../lib/fleet.js';

const ROLES = [
  ['member-1', { environment: 'staging' }],
  ['member-2', { environment: 'canary' }],
  ['member-3', { environment: 'production', order: '1' }],
];
const V1 = 'registry.invalid/journey-web:1';
const V2 = 'registry.invalid/journey-web:2';
const SOAK = '3s';
const RUN_TIMEOUT = 240_000;

const ns = uniqueName('journey');
let browser;

// Runs also when the test failed: what it applied goes (the placement first, so the agents
// remove the workload from the members), the members' labels come back.
after(async () => {
  await browser?.close();
  cleanUp();
});

/** Member `i`'s Deployment `web` in the journey's namespace, or null. */
function memberDeployment(i) {
  try {
    const out = kubectl(['-n', ns, 'get', 'deployment', 'web', '-o', 'json'], {
      kubeconfig: join(FLEET_DIR, `member-${i}.kubeconfig`),
    });
    return JSON.parse(out);
  } catch (e) {
    if (String(e.stderr || '').includes('NotFound')) return null;
    throw e;
  }
}

const imageOf = (d) => d?.spec?.template?.spec?.containers?.[0]?.image;

/** Whether member `i` runs `image` with every replica updated and available. */
function runs(i, image) {
  const d = memberDeployment(i);
  return imageOf(d) === image && d.status?.availableReplicas === 2 && d.status?.updatedReplicas === 2;
}

function workload(image) {
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name: 'web', namespace: ns },
    spec: {
      replicas: 2,
      selector: { matchLabels: { app: 'web' } },
      template: {
        metadata: { labels: { app: 'web' } },
        spec: { containers: [{ name: 'web', image }] },
      },
    },
  };
}

/** Condition `type` of an object (in its status) or of a status entry (a stage, a cluster). */
function condition(obj, type) {
  return (obj?.status?.conditions ?? obj?.conditions)?.find((c) => c.type === type);
}

function startRun(name, index) {
  apply([
    {
      apiVersion: 'fleethub.dev/v1alpha1',
      kind: 'UpdateRun',
      metadata: { name },
      spec: { placementName: ns, resourceSnapshotIndex: String(index), stagedRolloutStrategyName: ns },
    },
  ]);
}

async function succeeded(name) {
  return waitFor(
    `UpdateRun ${name} to succeed`,
    () => {
      const run = getJson('updaterun', name);
      const done = condition(run, 'Succeeded');
      if (done?.status === 'False') throw new Error(`${name} failed: ${done.message}`);
      return done?.status === 'True' ? run : null;
    },
    RUN_TIMEOUT,
  );
}

/** Approves every gate of `run` with kubectl as it appears, until the run succeeds. */
async function runWithKubectlApprovals(name) {
  return waitFor(
    `UpdateRun ${name} to succeed (gates approved with kubectl)`,
    () => {
      for (const stage of ['canary', 'production']) {
        const gate = `${name}-${stage}`;
        if (getJson('approvalrequest', gate) && approvalCondition(gate)?.status !== 'True') {
          approveWithKubectl(gate, 'journey: approved with kubectl');
        }
      }
      const run = getJson('updaterun', name);
      return condition(run, 'Succeeded')?.status === 'True' ? run : null;
    },
    RUN_TIMEOUT,
  );
}

const ms = (t) => new Date(t).getTime();

/** The status of a finished run: every stage and cluster finished, in the strategy's order. */
function assertCompleteAndOrdered(run) {
  const stages = run.status.stagesStatus;
  assert.deepEqual(
    stages.map((s) => s.stageName),
    ['staging', 'canary', 'production'],
  );
  assert.deepEqual(
    stages.map((s) => s.clusters.map((c) => c.clusterName)),
    [['member-1'], ['member-2'], ['member-3']],
  );
  for (const s of stages) {
    assert.ok(s.startTime && s.endTime, `stage ${s.stageName} has start and end times`);
    assert.equal(condition(s, 'Succeeded')?.status, 'True', `stage ${s.stageName} succeeded: ${JSON.stringify(s.conditions)}`);
    for (const c of s.clusters) {
      assert.ok(c.startTime && c.endTime, `${c.clusterName} has start and end times`);
      assert.equal(condition(c, 'Succeeded')?.status, 'True', `${c.clusterName} succeeded: ${JSON.stringify(c.conditions)}`);
    }
  }
  // No stage's cluster started before the previous stage (and its gates) ended.
  for (let i = 1; i < stages.length; i++) {
    for (const c of stages[i].clusters) {
      assert.ok(
        ms(c.startTime) >= ms(stages[i - 1].endTime),
        `${c.clusterName} started before stage ${stages[i - 1].stageName} ended`,
      );
    }
  }
  assert.ok(run.status.startTime && run.status.endTime, 'the run has start and end times');
}

test('the staged-deploy journey: new image stage by stage through kubectl and dashboard approvals, then a rollback', async () => {
  // The fleet's roles, the workload on the hub, the strategy and the placement.
  labelMembers(Object.fromEntries(ROLES));
  apply([
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } },
    { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'web', namespace: ns }, data: { greeting: 'hello' } },
    workload(V1),
    {
      apiVersion: 'fleethub.dev/v1alpha1',
      kind: 'StagedUpdateStrategy',
      metadata: { name: ns },
      spec: {
        stages: [
          {
            name: 'staging',
            labelSelector: { matchLabels: { environment: 'staging' } },
            afterStageTasks: [{ type: 'TimedWait', waitTime: SOAK }],
          },
          {
            name: 'canary',
            labelSelector: { matchLabels: { environment: 'canary' } },
            afterStageTasks: [{ type: 'Approval' }],
          },
          {
            name: 'production',
            labelSelector: { matchLabels: { environment: 'production' } },
            sortingLabelKey: 'order',
            afterStageTasks: [{ type: 'Approval' }, { type: 'TimedWait', waitTime: SOAK }],
          },
        ],
      },
    },
    {
      apiVersion: 'fleethub.dev/v1alpha1',
      kind: 'Placement',
      metadata: { name: ns },
      spec: {
        resourceSelectors: [{ group: '', version: 'v1', kind: 'Namespace', name: ns }],
        policy: { placementType: 'PickFixed', clusterNames: ['member-1', 'member-2', 'member-3'] },
        strategy: { type: 'External' },
      },
    },
  ]);
  await waitFor('snapshot 0', () => getJson('resourcesnapshot', `${ns}-0-snapshot`));

  // Version 1 everywhere.
  startRun(`${ns}-v1`, 0);
  await runWithKubectlApprovals(`${ns}-v1`);
  for (const i of [1, 2, 3]) await waitFor(`member-${i} to run version 1`, () => runs(i, V1), RUN_TIMEOUT);

  // A new image on the hub is a new snapshot; an External placement moves no cluster by itself.
  apply([workload(V2)]);
  await waitFor('snapshot 1', () => getJson('resourcesnapshot', `${ns}-1-snapshot`));
  assert.equal(imageOf(memberDeployment(1)), V1);

  const run = `${ns}-v2`;
  startRun(run, 1);
  await waitFor('staging (member-1) to run version 2', () => runs(1, V2), RUN_TIMEOUT);

  // The canary gate: canary has updated, production has not.
  const canaryGate = `${run}-canary`;
  await waitFor(`ApprovalRequest ${canaryGate}`, () => getJson('approvalrequest', canaryGate), RUN_TIMEOUT);
  await waitFor('canary (member-2) to run version 2', () => runs(2, V2), RUN_TIMEOUT);
  assert.equal(imageOf(memberDeployment(3)), V1, 'production updated before the canary gate');
  approveWithKubectl(canaryGate, 'canary looks good (kubectl)');

  // The production gate, approved in the dashboard by the admin.
  const productionGate = `${run}-production`;
  await waitFor(`ApprovalRequest ${productionGate}`, () => getJson('approvalrequest', productionGate), RUN_TIMEOUT);
  await waitFor('production (member-3) to run version 2', () => runs(3, V2), RUN_TIMEOUT);
  assert.notEqual(condition(getJson('updaterun', run), 'Succeeded')?.status, 'True', 'the run ended before its last gate');
  browser = await launchBrowser();
  const page = await browser.context.newPage();
  await signIn(page, 'admin', `/runs/${run}`);
  await page.click(`li.stage[data-stage="production"] a[href="/approvals/${productionGate}/approve"]`);
  await page.waitForURL(`${DASHBOARD_URL}/approvals/${productionGate}/approve`);
  await Promise.all([page.waitForURL(`${DASHBOARD_URL}/runs/${run}`), page.click('#confirm-approve')]);
  const approved = approvalCondition(productionGate);
  assert.equal(approved?.status, 'True');
  assert.match(approved.message, /^approved by system:serviceaccount:/);

  // The run finishes, after the production soak, with a complete status in the strategy's order.
  const done = await succeeded(run);
  assertCompleteAndOrdered(done);
  const production = done.status.stagesStatus[2];
  assert.ok(
    ms(production.endTime) >= ms(approved.lastTransitionTime),
    'production ended before it was approved',
  );
  const canary = done.status.stagesStatus[1];
  assert.ok(
    ms(production.clusters[0].startTime) >= ms(approvalCondition(canaryGate).lastTransitionTime),
    'production started before the canary approval',
  );
  const staging = done.status.stagesStatus[0];
  assert.ok(
    ms(canary.clusters[0].startTime) - ms(staging.clustersCompletedTime ?? staging.endTime) >= 3000 - 1000,
    'canary started before the staging soak passed',
  );
  for (const i of [1, 2, 3]) assert.ok(runs(i, V2), `member-${i} runs version 2`);
  await page.waitForSelector('text=Succeeded');
  await screenshot(page, 'journey-run-succeeded.png');

  // Rollback: a run pointing at snapshot 0 brings version 1 back, stage by stage.
  startRun(`${ns}-rollback`, 0);
  const rolledBack = await runWithKubectlApprovals(`${ns}-rollback`);
  assertCompleteAndOrdered(rolledBack);
  for (const i of [1, 2, 3]) await waitFor(`member-${i} to run version 1 again`, () => runs(i, V1), RUN_TIMEOUT);
});
