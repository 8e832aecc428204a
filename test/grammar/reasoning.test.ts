// Thinking models: the leading <think>...</think> block goes to reasoning_content and never leaks
// into content, however the stream is split; enable_thinking=false turns the split off.
import { describe, expect, it } from 'vitest';
import type { RequestHandle, SubmitOptions } from '../../src/engine/engine.js';
import type { EngineEvent } from '../../src/engine/request.js';
import { ReasoningSplitter } from '../../src/server/reasoning.js';
import { createServer } from '../../src/server/server.js';
import { makeEngine } from '../engine/helpers.js';
import { byteModel, post } from '../server/helpers.js';

const OUTPUT = '<think>\nLet me think: 2 < 3 and </thin is not a tag.\n</think>\n\nThe answer is <b>4</b>.';

describe('ReasoningSplitter', () => {
  it('splits the same way whatever the chunking', () => {
    const whole = ReasoningSplitter.split(OUTPUT);
    expect(whole).toEqual({ reasoning: '\nLet me think: 2 < 3 and </thin is not a tag.\n', content: 'The answer is <b>4</b>.' });
    for (let size = 1; size <= 9; size++) {
      const r = new ReasoningSplitter();
      let reasoning = '';
      let content = '';
      for (let i = 0; i < OUTPUT.length; i += size) {
        const p = r.push(OUTPUT.slice(i, i + size));
        reasoning += p.reasoning;
        content += p.content;
      }
      const f = r.flush();
      expect({ reasoning: reasoning + f.reasoning, content: content + f.content }).toEqual(whole);
    }
  });

  it('leaves output without a think block alone, and keeps unfinished reasoning out of content', () => {
    expect(ReasoningSplitter.split('  plain <think> text')).toEqual({ reasoning: '', content: '  plain <think> text' });
    expect(ReasoningSplitter.split('<think>cut off </thi')).toEqual({ reasoning: 'cut off </thi', content: '' });
    expect(ReasoningSplitter.split('<thi')).toEqual({ reasoning: '', content: '<thi' });
  });
});

/** A server whose engine replays OUTPUT in 3-character deltas. */
async function scriptedServer() {
  const { engine } = makeEngine();
  engine.submit = (opts: SubmitOptions): RequestHandle => {
    const deltas: EngineEvent[] = [];
    for (let i = 0; i < OUTPUT.length; i += 3) deltas.push({ type: 'delta', text: OUTPUT.slice(i, i + 3), token: 1 });
    const done: EngineEvent = {
      type: 'done',
      finishReason: 'stop',
      text: OUTPUT,
      tokenIds: [],
      stopString: null,
      usage: { promptTokens: opts.promptIds.length, completionTokens: deltas.length, totalTokens: opts.promptIds.length + deltas.length, cachedTokens: 0 },
      timings: { queueMs: 0, ttftMs: 0, totalMs: 0, decodeTokensPerSecond: 0 },
      preemptions: 0,
    };
    return {
      id: opts.id ?? 'x',
      numPromptTokens: opts.promptIds.length,
      abort: () => undefined,
      events: (async function* () {
        yield* deltas;
        yield done;
      })(),
    };
  };
  const server = createServer({ engine, model: { ...byteModel(256), reasoning: true } });
  const { url } = await server.listen(0, '127.0.0.1');
  return { server, url };
}

describe('reasoning_content over HTTP', () => {
  it('non-streamed and streamed responses carry reasoning separately; enable_thinking=false keeps it in content', async () => {
    const { server, url } = await scriptedServer();
    try {
      const body = { messages: [{ role: 'user', content: 'q' }] };
      const r = (await post(url, '/v1/chat/completions', body)).json();
      expect(r.choices[0].message).toEqual({ role: 'assistant', content: 'The answer is <b>4</b>.', reasoning_content: '\nLet me think: 2 < 3 and </thin is not a tag.\n' });

      const s = await post(url, '/v1/chat/completions', { ...body, stream: true });
      let reasoning = '';
      let content = '';
      for (const line of s.text.split('\n')) {
        if (!line.startsWith('data: {')) continue;
        const d = JSON.parse(line.slice(6)).choices[0]?.delta ?? {};
        reasoning += d.reasoning_content ?? '';
        content += d.content ?? '';
        expect(d.content ?? '').not.toContain('think>');
      }
      expect({ reasoning, content }).toEqual({ reasoning: r.choices[0].message.reasoning_content, content: r.choices[0].message.content });

      const off = (await post(url, '/v1/chat/completions', { ...body, chat_template_kwargs: { enable_thinking: false } })).json();
      expect(off.choices[0].message).toEqual({ role: 'assistant', content: OUTPUT });
    } finally {
      await server.close(100);
    }
  });
});
