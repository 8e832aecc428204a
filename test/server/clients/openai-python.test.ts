// The OpenAI Python SDK (unmodified) against rapid serve over real HTTP on a tool-capable fixture:
// every request field the issue lists, streaming, parse() with a pydantic model, tools, legacy
// completions, and the 400/404 it raises. Python with `openai` is found through $RAPID_PYTHON or
// the venv at /work/venvs/openai-py; without one the test skips (CI).
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServer, type RunningServer } from '../../../src/cli/commands/serve.js';
import { nativeAvailable } from '../../helpers/addon.js';
import { FIXTURE_ROOT } from '../../helpers/fixtures.js';
import { fixtureServeOptions } from '../../helpers/openai-chat.js';
import { schemaViolation } from '../../grammar/json-schema-check.mjs';

const VENV_PYTHON = '/work/venvs/openai-py/bin/python';

/** A python that can import openai and pydantic, or null. */
function pythonWithOpenai(): string | null {
  const candidates = [process.env.RAPID_PYTHON, existsSync(VENV_PYTHON) ? VENV_PYTHON : undefined].filter((p): p is string => !!p);
  for (const py of candidates) {
    const r = spawnSync(py, ['-c', 'import openai, pydantic'], { timeout: 30_000 });
    if (r.status === 0) return py;
  }
  return null;
}

const PYTHON = pythonWithOpenai();
const SCRIPT = join(import.meta.dirname, 'openai_python_client.py');
const WEATHER = {
  type: 'object',
  properties: { city: { enum: ['Oslo', 'Lima'] }, days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['city', 'days'],
};

/** Runs the script without blocking the event loop (the server answers it from this process). */
function runScript(py: string, url: string, model: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(py, [SCRIPT, `${url}/v1`, model], { timeout: 120_000 });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe.skipIf(!nativeAvailable() || PYTHON === null)('OpenAI Python SDK against rapid serve (qwen2-q4)', () => {
  let srv: RunningServer;
  const model = 'fixture-qwen2-q4';
  beforeAll(async () => {
    srv = await startServer(`${FIXTURE_ROOT}/qwen2-q4`, fixtureServeOptions(model));
  });
  afterAll(async () => {
    await srv?.close(1000);
  });

  it('chat with every listed field, streaming, parse(), tools, completions and errors', async () => {
    const r = await runScript(PYTHON!, srv.url, model);
    expect(r.code, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as Record<string, any>;
    expect(out.models).toEqual([model]);
    expect(out.chat.finish).toBe('length');
    expect(out.chat.completion_tokens).toBe(8);
    expect(out.stream).toEqual({ text: out.chat.text, completion_tokens: 8 });
    expect(schemaViolation(WEATHER, out.parsed)).toBeNull();
    expect(out.tool.name).toBe('get_weather');
    expect(out.tool.finish).toBe('tool_calls');
    expect(schemaViolation(WEATHER, out.tool.args)).toBeNull();
    expect(out.completion.text.length).toBeGreaterThan(0);
    expect(out.bad).toEqual({ status: 400, param: 'temperature' });
    expect(out.unknown_model).toBe(404);
  }, 180_000);
});
