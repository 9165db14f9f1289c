// k8s-check.mjs - etc/k8s/ignis.yaml checked by schemas nobody here wrote,
// and its parts against each other.
//   node k8s-check.mjs MODULES_DIR MANIFEST
// MODULES_DIR: a node_modules holding yaml, kubernetes-models and
// @kubernetes-models/gateway-api (tools/install-oracle.sh pins them).
// Prints one line per check; exits 1 at the first failure, naming it.
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const [mods, manifest] = process.argv.slice(2);
const load = (p) => import(pathToFileURL(path.join(mods, p)).href);
const YAML = await load('yaml/dist/index.js');
const { Deployment } = await load('kubernetes-models/apps/v1/Deployment.js');
const { Service } = await load('kubernetes-models/v1/Service.js');
const { HTTPRoute } = await load(
  '@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1/HTTPRoute.js');

function fail(what) {
  console.log(`FAIL: ${what}`);
  process.exit(1);
}
function ok(what) {
  console.log(`ok ${what}`);
}

const docs = YAML.parseAllDocuments(readFileSync(manifest, 'utf8'));
for (const d of docs) if (d.errors.length) fail(`YAML: ${d.errors[0].message}`);
const objs = docs.map((d) => d.toJS());
const find = (kind) => objs.find((o) => o.kind === kind) || fail(`no ${kind} in ${manifest}`);

// the published schemas (validate() throws, naming the field)
const schema = { Deployment, Service, HTTPRoute };
for (const o of objs) {
  if (o.kind === 'InferencePool') continue;
  const Model = schema[o.kind];
  if (!Model) fail(`${o.kind}: a kind this check does not know`);
  try {
    new Model(o).validate();
  } catch (e) {
    fail(`${o.kind} ${o.metadata?.name}: ${e.message}`);
  }
  ok(`${o.kind} ${o.metadata.name}: valid against its published schema`);
}

// InferencePool (inference.networking.k8s.io/v1): no schema of it is
// published in a package registry; the fields the API requires and their
// types, as its reference gives them
const pool = find('InferencePool');
if (pool.apiVersion !== 'inference.networking.k8s.io/v1') fail(`InferencePool apiVersion ${pool.apiVersion}`);
const ps = pool.spec || fail('InferencePool: no spec');
const labels = ps.selector?.matchLabels;
if (!labels || typeof labels !== 'object' || !Object.keys(labels).length)
  fail('InferencePool: spec.selector.matchLabels is required');
if (!Array.isArray(ps.targetPorts) || ps.targetPorts.length !== 1)
  fail('InferencePool: spec.targetPorts holds exactly one port');
const tport = ps.targetPorts[0].number;
if (!Number.isInteger(tport) || tport < 1 || tport > 65535)
  fail(`InferencePool: targetPorts[0].number ${tport}`);
const epp = ps.endpointPickerRef;
if (!epp?.name) fail('InferencePool: spec.endpointPickerRef.name is required');
if (epp.port && !Number.isInteger(epp.port.number)) fail('InferencePool: endpointPickerRef.port.number');
if (epp.failureMode && !['FailOpen', 'FailClose'].includes(epp.failureMode))
  fail(`InferencePool: failureMode ${epp.failureMode}`);
ok('InferencePool ignis: the fields inference.networking.k8s.io/v1 requires');

// the parts agree
const dep = find('Deployment');
const svc = find('Service');
const route = find('HTTPRoute');
const podLabels = dep.spec.template.metadata.labels;
const selects = (sel) => Object.entries(sel).every(([k, v]) => podLabels[k] === v);
if (!selects(dep.spec.selector.matchLabels)) fail('the Deployment does not select its own pods');
if (!selects(svc.spec.selector)) fail('the Service does not select the pods');
if (!selects(labels)) fail('the InferencePool does not select the pods');
const c = dep.spec.template.spec.containers[0];
const named = (p) => (typeof p === 'string' ? c.ports.find((q) => q.name === p)?.containerPort : p);
const arg = (flag) => c.args.find((a) => a.startsWith(`--${flag}=`))?.split('=')[1];
const httpPort = Number(arg('server-http-bind')?.split(':').pop());
if (!httpPort) fail('the container does not set --server-http-bind');
if (named('http') !== httpPort) fail(`port "http" is not --server-http-bind's ${httpPort}`);
if (named('metrics') !== Number(arg('server-metrics-bind')?.split(':').pop()))
  fail('port "metrics" is not --server-metrics-bind\'s');
if (arg('server-allow-remote') !== 'on') fail('a bind past loopback needs --server-allow-remote=on');
if (tport !== httpPort) fail(`the pool targets ${tport}, the API listens on ${httpPort}`);
for (const [probe, want] of [['startupProbe', '/health'], ['livenessProbe', '/health'],
  ['readinessProbe', '/ready']]) {
  const g = c[probe]?.httpGet || fail(`no ${probe}`);
  if (g.path !== want || named(g.port) !== httpPort) fail(`${probe}: ${g.path} on ${g.port}`);
}
if (c.resources?.limits?.['nvidia.com/gpu'] !== 1) fail('one GPU a pod: Ignis plans one device');
const be = route.spec.rules.flatMap((r) => r.backendRefs);
if (!be.some((b) => b.kind === 'InferencePool' && b.name === pool.metadata.name &&
  b.group === 'inference.networking.k8s.io')) fail('the HTTPRoute does not route to the pool');
ok('the Deployment, Service, InferencePool and HTTPRoute agree (labels, ports, probes)');
// the container's flags, for the supervisor's own parser (k8s.sh runs it)
console.log(`args ${c.args.join(' ')}`);
