// deploy/kubernetes agrees with the CLI and the server: every serve flag exists and parses, the
// container port is the --port, probes hit routes that answer, the Service and HPA point at the
// Deployment, and the HPA's metric is one /metrics serves (the adapter rule names the same).
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { Command } from 'commander';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { registerServe, type ServeOptions } from '../../src/cli/commands/serve.js';
import { raw, startFakeServer } from '../server/helpers.js';

const DIR = resolve(import.meta.dirname, '..', '..', 'deploy', 'kubernetes');

type Obj = Record<string, any>; // parsed YAML: checked field by field below

function manifests(file: string): Obj[] {
  const docs = parseAllDocuments(readFileSync(resolve(DIR, file), 'utf8'));
  for (const d of docs) expect(d.errors, `${file}: ${d.errors.join('; ')}`).toEqual([]);
  return docs.map((d) => d.toJS() as Obj);
}

const byKind = (docs: Obj[], kind: string) => docs.find((d) => d.kind === kind)!;

describe('deploy/kubernetes', () => {
  const deploymentDocs = manifests('deployment.yaml');
  const deployment = byKind(deploymentDocs, 'Deployment');
  const pvc = byKind(deploymentDocs, 'PersistentVolumeClaim');
  const service = byKind(manifests('service.yaml'), 'Service');
  const hpa = byKind(manifests('hpa.yaml'), 'HorizontalPodAutoscaler');
  const pod = deployment.spec.template.spec;
  const container = pod.containers[0];

  /** The container's args parsed by the real `rapid serve` command (its parsers reject bad values). */
  function serveArgs(): { model: string; opts: ServeOptions } {
    const program = new Command('rapid').exitOverride();
    registerServe(program);
    const serve = program.commands.find((c) => c.name() === 'serve')!;
    const args: string[] = container.args;
    expect(args[0]).toBe('serve');
    for (const a of args.filter((x) => x.startsWith('--'))) expect(serve.options.map((o) => o.long), `${a} is not a rapid serve option`).toContain(a);
    const { operands, unknown } = serve.parseOptions(args.slice(1));
    expect(unknown).toEqual([]);
    expect(operands).toHaveLength(1);
    return { model: operands[0]!, opts: serve.opts<ServeOptions>() };
  }

  it('runs rapid serve with flags the CLI accepts, reachable on the container port', () => {
    const { model, opts } = serveArgs();
    expect(model).toMatch(/\S/);
    expect(opts.host).toBe('0.0.0.0'); // the default (loopback) would be unreachable from the kubelet
    const http = container.ports.find((p: Obj) => p.name === 'http');
    expect(http.containerPort).toBe(opts.port);
    expect(deployment.spec.template.metadata.annotations['prometheus.io/port']).toBe(String(opts.port));
    // The kubelet must wait for the drain and the grace period before it kills the container.
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThan(opts.drainDelay + opts.shutdownGrace);
    expect(opts.drainDelay).toBeGreaterThan(0);
    expect(container.resources.limits['nvidia.com/gpu']).toBe('1');
    // The model cache volume holds the Hugging Face cache rapid pulls into (HF_HOME).
    const home = container.env.find((e: Obj) => e.name === 'HF_HOME').value;
    const mount = container.volumeMounts.find((m: Obj) => m.mountPath === home);
    expect(pod.volumes.find((v: Obj) => v.name === mount.name).persistentVolumeClaim.claimName).toBe(pvc.metadata.name);
  });

  it('probes readiness on /health/ready and liveness on /health, which the server answers', async () => {
    expect(container.readinessProbe.httpGet).toEqual({ path: '/health/ready', port: 'http' });
    expect(container.livenessProbe.httpGet).toEqual({ path: '/health', port: 'http' });
    expect(container.startupProbe.httpGet.port).toBe('http');
    const { server, url } = await startFakeServer({}, {}, { apiKey: 'secret' }); // probes need no key
    try {
      for (const p of [container.readinessProbe, container.livenessProbe, container.startupProbe]) expect((await raw(url, p.httpGet.path)).status).toBe(200);
    } finally {
      await server.close(1000);
    }
  });

  it('points the Service and the HPA at the Deployment, on a metric rapid serves', async () => {
    const labels = deployment.spec.template.metadata.labels;
    for (const [k, v] of Object.entries(service.spec.selector)) expect(labels[k]).toBe(v);
    expect(deployment.spec.selector.matchLabels).toEqual(service.spec.selector);
    expect(service.spec.ports[0].targetPort).toBe('http');
    expect(hpa.spec.scaleTargetRef).toMatchObject({ kind: 'Deployment', name: deployment.metadata.name });
    const metric = hpa.spec.metrics[0].pods.metric.name as string;
    const { server, url } = await startFakeServer();
    try {
      expect((await raw(url, '/metrics')).text).toMatch(new RegExp(`^# TYPE ${metric} gauge$`, 'm'));
    } finally {
      await server.close(1000);
    }
    const adapter = manifests('prometheus-adapter.yaml')[0]!;
    expect(adapter.rules.custom.map((r: Obj) => r.name.as)).toContain(metric);
  });
});
