// The Grafana dashboard in deploy/grafana/ queries only what /metrics exposes: every series it
// selects exists on a real server after a request, with every label it filters on.
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MODEL_ID, post, raw, startFakeServer } from '../server/helpers.js';

const DASHBOARD = resolve(import.meta.dirname, '..', '..', 'deploy', 'grafana', 'rapid-dashboard.json');

interface Panel { title: string; targets?: { expr: string }[] }

/** Series name -> the label names it carries in the exposition text. */
function seriesLabels(text: string): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>();
  for (const line of text.split('\n')) {
    const m = /^([a-z_:][a-z0-9_:]*)(?:\{([^}]*)\})? /i.exec(line);
    if (!m) continue;
    const labels = out.get(m[1]!) ?? new Set<string>();
    for (const pair of (m[2] ?? '').split(',').filter(Boolean)) labels.add(pair.split('=')[0]!);
    out.set(m[1]!, labels);
  }
  return out;
}

describe('deploy/grafana dashboard', () => {
  it('queries only series /metrics exposes, with the labels it filters on', async () => {
    const dash = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as { panels: Panel[]; templating: { list: { query: { query: string } }[] } };
    const { server, url } = await startFakeServer();
    try {
      await post(url, '/v1/chat/completions', { model: MODEL_ID, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, stream: true });
      const series = seriesLabels((await raw(url, '/metrics')).text);
      const exprs = [...dash.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr)), ...dash.templating.list.map((v) => v.query.query)];
      expect(exprs.length).toBeGreaterThan(10);
      const checked = new Set<string>();
      for (const expr of exprs) {
        for (const m of expr.matchAll(/\b(rapid_[a-z_]+)(\{([^}]*)\})?/g)) {
          const name = m[1]!;
          expect(series.has(name), `${name} (in ${expr}) is not in /metrics`).toBe(true);
          // instance is Prometheus' own target label, not the exporter's.
          const filtered = [...(m[3] ?? '').matchAll(/([a-z_]+)\s*[=!~]/g)].map((l) => l[1]!).filter((l) => l !== 'instance');
          for (const l of filtered) expect(series.get(name)!.has(l), `${name} has no label ${l}`).toBe(true);
          checked.add(name);
        }
      }
      for (const h of ['rapid_inter_token_latency_seconds', 'rapid_request_queue_seconds', 'rapid_request_prefill_seconds', 'rapid_time_to_first_token_seconds']) {
        expect(checked).toContain(`${h}_bucket`);
      }
    } finally {
      await server.close(1000);
    }
  });
});
