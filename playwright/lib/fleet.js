// Reusable helpers for browser tests against the real local fleet (deploy/local/fleet up):
// the hub via kubectl, scenarios with approval gates, Chromium, and signing in.
//
// Environment (deploy/local/fleet test sets these):
//   FLEET_DIR       the fleet's state directory (hub.kubeconfig, admin.token, viewer.token)
//   DASHBOARD_URL   e.g. http://127.0.0.1:17200
//   KUBECTL         kubectl binary (default kubectl)
//   CHROMIUM        browser binary (default /usr/bin/chromium)

import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { chromium } from 'playwright-core';

const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export const FLEET_DIR = process.env.FLEET_DIR || join(repo, '.fleet');
export const DASHBOARD_URL =
  process.env.DASHBOARD_URL ||
  `http://127.0.0.1:${Number(process.env.FLEET_PORT_BASE || 17000) + 200}`;
export const KUBECTL = process.env.KUBECTL || 'kubectl';
export const ARTIFACTS = join(repo, 'playwright', 'artifacts');

/** Runs kubectl against the hub as its admin; returns stdout. `input` is fed on stdin. */
export function kubectl(args, { input, kubeconfig = join(FLEET_DIR, 'hub.kubeconfig') } = {}) {
  return execFileSync(KUBECTL, ['--kubeconfig', kubeconfig, ...args], {
    input,
    encoding: 'utf8',
    stdio: ['pipe', 'pipe', 'pipe'],
  });
}

/** kubectl get -o json, parsed; null when the object does not exist. */
export function getJson(kind, name) {
  try {
    return JSON.parse(kubectl(['get', kind, name, '-o', 'json']));
  } catch (e) {
    if (String(e.stderr || '').includes('NotFound')) return null;
    throw e;
  }
}

/**
 * What this test file created or changed on the hub, newest last: objects to delete
 * ({ kind, name, namespace }) and member labels to restore ({ member, key, value }). cleanUp()
 * undoes it all; every test file calls it from an `after` hook, which runs also when a test
 * fails, so the fleet is left as it was found (a user's demo runs on the same fleet).
 */
const undo = [];

/** Records hub object `kind`/`name` (in `namespace`) for cleanUp() to delete. */
export function track(kind, name, namespace) {
  if (!undo.some((u) => u.kind === kind && u.name === name && u.namespace === namespace)) {
    undo.push({ kind, name, namespace });
  }
}

/**
 * Sets labels on MemberClusters ({ 'member-1': { key: value } }), recording each label's
 * previous value (or its absence) so cleanUp() puts it back.
 */
export function labelMembers(labelsByMember) {
  for (const [member, labels] of Object.entries(labelsByMember)) {
    const before = getJson('membercluster', member)?.metadata?.labels ?? {};
    for (const key of Object.keys(labels)) {
      if (!undo.some((u) => u.member === member && u.key === key)) undo.push({ member, key, value: before[key] });
    }
    const pairs = Object.entries(labels).map(([k, v]) => `${k}=${v}`);
    kubectl(['label', 'membercluster', member, ...pairs, '--overwrite']);
  }
}

/**
 * Undoes what this file's tests did on the hub, newest first: deletes each recorded object
 * (foreground: what it owns goes first, so member agents remove the workload from the members)
 * and waits until it is gone, and restores the members' labels. Throws, naming them, if any
 * could not be undone.
 */
export function cleanUp() {
  const failed = [];
  for (const u of undo.splice(0).reverse()) {
    try {
      if (u.member) {
        const label = u.value === undefined ? `${u.key}-` : `${u.key}=${u.value}`;
        kubectl(['label', 'membercluster', u.member, label, '--overwrite']);
      } else {
        const ns = u.namespace ? ['-n', u.namespace] : [];
        kubectl(['delete', u.kind, u.name, ...ns, '--ignore-not-found', '--cascade=foreground', '--wait=true', '--timeout=180s']);
      }
    } catch (e) {
      failed.push(`${u.member ? `label ${u.key} of ${u.member}` : `${u.kind} ${u.name}`}: ${String(e.stderr || e.message).trim()}`);
    }
  }
  if (failed.length) throw new Error(`clean-up left the fleet changed:\n${failed.join('\n')}`);
}

/** Applies objects (JS values) to the hub with server-side apply; cleanUp() deletes them. */
export function apply(objects) {
  for (const o of objects) track(o.kind.toLowerCase(), o.metadata.name, o.metadata.namespace);
  const input = objects.map((o) => JSON.stringify(o)).join('\n');
  kubectl(['apply', '--server-side', '--field-manager=fleethub-e2e', '-f', '-'], { input });
}

/** A token of the local fleet's identities: 'admin' or 'viewer'. */
export function token(who) {
  return readFileSync(join(FLEET_DIR, `${who}.token`), 'utf8').trim();
}

/** A DNS-label name unique to this test run. */
export function uniqueName(prefix) {
  return `${prefix}-${randomBytes(3).toString('hex')}`;
}

/** Polls `check` (sync or async; a truthy result ends it) until `timeoutMs` passes. */
export async function waitFor(what, check, timeoutMs = 60_000, everyMs = 250) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const v = await check();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${last.message}` : ''}`);
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** The ApprovalRequest's condition `type`, or undefined. */
export function approvalCondition(name, type = 'Approved') {
  const ar = getJson('approvalrequest', name);
  return ar?.status?.conditions?.find((c) => c.type === type);
}

/** Approves like a person with kubectl does (the README's command). */
export function approveWithKubectl(name, message = 'approved with kubectl') {
  const patch = {
    status: {
      conditions: [
        {
          type: 'Approved',
          status: 'True',
          reason: 'Approved',
          message,
          lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
        },
      ],
    },
  };
  kubectl(['patch', 'approvalrequest', name, '--subresource=status', '--type=merge', '-p', JSON.stringify(patch)]);
}

/**
 * A rollout that stops at approval gates: a namespace with a ConfigMap, a Placement of it on
 * every local member, a strategy with stages `first` (member-1) and `second` (member-2), each
 * gated by an Approval, then `rest` (member-3), and an UpdateRun of snapshot 0. Members get a
 * label of the e2e tests' own (e2e.fleethub.dev/tier), so the scenario does not depend on or
 * disturb other tests' labels. Waits until the run waits for approval of stage `first`.
 * Returns { name, run, gates: { first, second } } (ApprovalRequest names).
 */
export async function createApprovalScenario(prefix = 'e2e') {
  const name = uniqueName(prefix);
  const tiers = { 'member-1': 'first', 'member-2': 'second', 'member-3': 'rest' };
  labelMembers(Object.fromEntries(Object.entries(tiers).map(([m, t]) => [m, { 'e2e.fleethub.dev/tier': t }])));
  const stage = (stageName, tier, gated) => ({
    name: stageName,
    labelSelector: { matchLabels: { 'e2e.fleethub.dev/tier': tier } },
    ...(gated ? { afterStageTasks: [{ type: 'Approval' }] } : {}),
  });
  apply([
    { apiVersion: 'v1', kind: 'Namespace', metadata: { name } },
    {
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'settings', namespace: name },
      data: { greeting: `hello from ${name}` },
    },
    {
      apiVersion: 'fleethub.dev/v1alpha1',
      kind: 'StagedUpdateStrategy',
      metadata: { name },
      spec: { stages: [stage('first', 'first', true), stage('second', 'second', true), stage('rest', 'rest', false)] },
    },
    {
      apiVersion: 'fleethub.dev/v1alpha1',
      kind: 'Placement',
      metadata: { name },
      spec: {
        resourceSelectors: [{ group: '', version: 'v1', kind: 'Namespace', name }],
        policy: { placementType: 'PickAll', clusterSelector: { matchLabels: { 'fleethub.dev/local-fleet': 'true' } } },
        strategy: { type: 'External' },
      },
    },
  ]);
  const run = await startRun(name);
  const gates = { first: `${run}-first`, second: `${run}-second` };
  await waitFor(`ApprovalRequest ${gates.first}`, () => getJson('approvalrequest', gates.first), 120_000);
  return { name, run, gates };
}

/**
 * Once placement `name` has its snapshot 0, starts UpdateRun `name` of it with strategy `name`
 * (cleanUp() deletes it). Returns the run's name.
 */
export async function startRun(name) {
  await waitFor(`resource snapshot ${name}-0-snapshot`, () => getJson('resourcesnapshot', `${name}-0-snapshot`));
  apply([
    {
      apiVersion: 'fleethub.dev/v1alpha1',
      kind: 'UpdateRun',
      metadata: { name },
      spec: { placementName: name, resourceSnapshotIndex: '0', stagedRolloutStrategyName: name },
    },
  ]);
  return name;
}

/** Debian's Chromium, headless, with a fresh profile. Call close() when done. */
export async function launchBrowser() {
  const profile = mkdtempSync(join(tmpdir(), 'fleethub-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    viewport: { width: 1280, height: 900 },
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/** Signs `page` in as 'admin' or 'viewer' through the sign-in form; lands on `next`. */
export async function signIn(page, who, next = '/') {
  await signInWithToken(page, token(who), next);
}

/** Signs `page` in with bearer token `bearer` through the sign-in form; lands on `next`. */
export async function signInWithToken(page, bearer, next = '/') {
  await page.goto(`${DASHBOARD_URL}/login?next=${encodeURIComponent(next)}`);
  await page.fill('#token', bearer);
  await Promise.all([page.waitForURL((u) => !u.pathname.startsWith('/login')), page.click('button[type=submit]')]);
}

/** Waits until the page's wasm client hydrated and its live feed is connected. */
export async function waitForLive(page) {
  await page.waitForSelector('.live[data-live="on"]', { timeout: 30_000 });
}

/** Waits (polling every 10 ms) until the open Fleet page's row of `cluster` contains `text`. */
export async function waitForMemberRow(page, cluster, text, timeoutMs = 10_000) {
  await page.waitForFunction(
    ([c, t]) => document.querySelector(`tr[data-cluster="${c}"]`)?.textContent.includes(t),
    [cluster, text],
    { timeout: timeoutMs, polling: 10 },
  );
}

/** The session's CSRF token, read from the page's sign-out form. */
export async function csrfOf(page) {
  return page.getAttribute('form.user input[name=csrf]', 'value');
}

/** Saves a full-page screenshot to playwright/artifacts/<file> and returns its path. */
export async function screenshot(page, file) {
  mkdirSync(ARTIFACTS, { recursive: true });
  const path = join(ARTIFACTS, file);
  await page.screenshot({ path, fullPage: true });
  console.log(`screenshot: ${path}`);
  return path;
}

/** The running fleet's settings (fleet.env), e.g. FLEET_PROMETHEUS, FLEET_TEST_EXPORTER. */
export function fleetEnv() {
  const text = readFileSync(join(FLEET_DIR, 'fleet.env'), 'utf8');
  return Object.fromEntries(
    text
      .split('\n')
      .filter((l) => l.includes('='))
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
}

/**
 * A gauge series `name{labels}` on the fleet's test exporter, which the fleet's Prometheus
 * scrapes every second: set(value) changes it, remove() deletes it (call it from an `after`
 * hook). Use a label with a unique value so tests never share a series.
 */
export function testGauge(name, labels) {
  const query = new URLSearchParams(labels).toString();
  const url = `${fleetEnv().FLEET_TEST_EXPORTER}/gauges/${name}?${query}`;
  const send = async (method, body) => {
    const res = await fetch(url, { method, body });
    if (res.status !== 200) throw new Error(`test exporter ${method} ${url}: HTTP ${res.status} ${await res.text()}`);
  };
  return {
    set: (value) => send('PUT', String(value)),
    remove: () => send('DELETE'),
  };
}
