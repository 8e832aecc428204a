// A native model stand-in that writes, byte by byte, the script named by the last user or tool
// message of a byteModel prompt ("...user: <key>\nassistant:"), then EOS (token 0): exact model output
// (reasoning, tool-call markup) through the real Engine and server. Script "echo" writes the prompt
// back. Context is kept per request id.
import { FakeModel } from '../helpers/fake-runner.js';
import type { NativeImageEmbedding, NativeModel, NativeModelInfo, NativeStepPlan, NativeStepResult } from '../../src/native/types.js';

export const SCRIPT_EOS = 0;

export class ScriptedModel implements NativeModel {
  private readonly base = new FakeModel({ contextLength: 4096, numBlocks: 2048, blockSize: 4 });
  private readonly ctx = new Map<string, number[]>();
  /** Where each request's output starts: the context length at its first sample. */
  private readonly starts = new Map<string, number>();
  constructor(private readonly scripts: Record<string, string>) {}
  info(): NativeModelInfo {
    return this.base.info();
  }
  encodeImage(): Promise<NativeImageEmbedding> {
    return Promise.reject(new Error('no vision'));
  }
  close(): void {}
  async step(plan: NativeStepPlan): Promise<NativeStepResult> {
    await new Promise<void>((r) => setImmediate(r));
    const rows = plan.rows.map((row) => {
      const prev = this.ctx.get(row.requestId) ?? [];
      if (prev.length < row.contextLen) throw new Error(`${row.requestId}: context ${row.contextLen} unknown`);
      const ctx = [...prev.slice(0, row.contextLen), ...row.tokens];
      this.ctx.set(row.requestId, ctx);
      if (!row.sample) return { requestId: row.requestId };
      const start = this.starts.get(row.requestId) ?? ctx.length;
      this.starts.set(row.requestId, start);
      const text = Buffer.from(ctx.slice(0, start)).toString('latin1');
      const prompt = text.slice(0, text.lastIndexOf('assistant:'));
      const key = /(?:^|\n)(?:user|tool): ([^\n]*)\n(?!(?:[\s\S]*\n)?(?:user|tool): )/.exec(prompt)?.[1] ?? '';
      const script = Buffer.from(key === 'echo' ? prompt : (this.scripts[key] ?? 'no script'), key === 'echo' ? 'latin1' : 'utf8');
      const done = ctx.length - start;
      return { requestId: row.requestId, token: done < script.length ? script[done]! : SCRIPT_EOS };
    });
    return { rows, timings: { forwardMs: 0, sampleMs: 0, tokens: 0 } };
  }
}
