// The Responses object and its event sequence, built from a generation's ordered parts: reasoning,
// message and function_call output items open and close as the parts change kind; streamed, each
// step becomes response.* events (sequence_number on every one), and the final object is the same
// one a non-streamed request gets.
import { randomUUID } from 'node:crypto';
import type { FinishReason, GenerationPart } from '../generation-stream.js';
import type { EngineDone } from '../../engine/request.js';
import type { HttpError } from '../http-errors.js';
import type { ResponseItem } from './store.js';

/** Sends one event (streaming); the builder adds type and sequence_number. */
export type EmitEvent = (type: string, event: Record<string, unknown>) => void;

type ItemStatus = 'in_progress' | 'completed' | 'incomplete';

interface OpenItem {
  kind: 'message' | 'reasoning' | 'function_call';
  outputIndex: number;
  item: ResponseItem;
  text: string;
}

const newId = (prefix: string) => `${prefix}_${randomUUID().replace(/-/g, '')}`;

export const newResponseId = () => newId('resp');

export class ResponseBuilder {
  readonly output: ResponseItem[] = [];
  private seq = 0;
  private open: OpenItem | null = null;
  /** Whitespace that would open a message item: held until text follows (none before a call). */
  private pendingSpace = '';
  private readonly calls = new Map<number, OpenItem>();
  private steps = 0;
  private reasoningSteps: number | null = null;
  private sawReasoning = false;

  /** `shell`: the response's fixed fields (id, created_at, model and the echoed request fields). */
  constructor(
    private readonly shell: Record<string, unknown>,
    private readonly emit: EmitEvent | null,
  ) {}

  private send(type: string, event: Record<string, unknown>): void {
    this.emit?.(type, { type, sequence_number: this.seq++, ...event });
  }

  /** response.created and response.in_progress. */
  start(): void {
    const r = this.response('in_progress', null, null);
    this.send('response.created', { response: r });
    this.send('response.in_progress', { response: r });
  }

  /** The parts of one generation step. */
  step(parts: GenerationPart[]): void {
    this.steps++;
    for (const p of parts) {
      if (p.type === 'reasoning') this.sawReasoning = true;
      else if (this.reasoningSteps === null) this.reasoningSteps = this.sawReasoning ? this.steps - 1 : 0;
      this.part(p);
    }
  }

  private part(p: GenerationPart): void {
    switch (p.type) {
      case 'reasoning': {
        const it = this.open?.kind === 'reasoning' ? this.open : this.openItem('reasoning');
        it.text += p.text;
        this.send('response.reasoning_text.delta', { item_id: it.item.id, output_index: it.outputIndex, content_index: 0, delta: p.text });
        return;
      }
      case 'content': {
        let it = this.open?.kind === 'message' ? this.open : null;
        if (!it) {
          if (p.text.trim() === '') {
            this.pendingSpace += p.text;
            return;
          }
          it = this.openItem('message');
        }
        const delta = this.pendingSpace + p.text;
        this.pendingSpace = '';
        it.text += delta;
        this.send('response.output_text.delta', { item_id: it.item.id, output_index: it.outputIndex, content_index: 0, delta, logprobs: [] });
        return;
      }
      case 'call': {
        this.pendingSpace = '';
        const it = this.openItem('function_call', { call_id: p.id, name: p.name });
        this.calls.set(p.index, it);
        return;
      }
      case 'args': {
        const it = this.calls.get(p.index);
        if (!it) return; // never sent before its call
        it.text += p.text;
        this.send('response.function_call_arguments.delta', { item_id: it.item.id, output_index: it.outputIndex, delta: p.text });
        return;
      }
    }
  }

  private openItem(kind: OpenItem['kind'], call?: { call_id: string; name: string }): OpenItem {
    this.closeOpen('completed');
    const outputIndex = this.output.length;
    let item: ResponseItem;
    if (kind === 'message') item = { id: newId('msg'), type: 'message', status: 'in_progress', role: 'assistant', content: [] };
    else if (kind === 'reasoning') item = { id: newId('rs'), type: 'reasoning', status: 'in_progress', summary: [], content: [] };
    else item = { id: newId('fc'), type: 'function_call', status: 'in_progress', call_id: call!.call_id, name: call!.name, arguments: '' };
    this.output.push(item);
    const it: OpenItem = { kind, outputIndex, item, text: '' };
    this.open = it;
    this.send('response.output_item.added', { output_index: outputIndex, item: structuredClone(item) });
    if (kind === 'message') this.send('response.content_part.added', { item_id: item.id, output_index: outputIndex, content_index: 0, part: this.textPart('') });
    if (kind === 'reasoning') this.send('response.content_part.added', { item_id: item.id, output_index: outputIndex, content_index: 0, part: { type: 'reasoning_text', text: '' } });
    return it;
  }

  private textPart(text: string) {
    return { type: 'output_text', text, annotations: [], logprobs: [] };
  }

  private closeOpen(status: ItemStatus): void {
    const it = this.open;
    if (!it) return;
    this.open = null;
    const base = { item_id: it.item.id, output_index: it.outputIndex };
    if (it.kind === 'message') {
      const part = this.textPart(it.text);
      this.send('response.output_text.done', { ...base, content_index: 0, text: it.text, logprobs: [] });
      this.send('response.content_part.done', { ...base, content_index: 0, part });
      Object.assign(it.item, { status, content: [part] });
    } else if (it.kind === 'reasoning') {
      const part = { type: 'reasoning_text', text: it.text };
      this.send('response.reasoning_text.done', { ...base, content_index: 0, text: it.text });
      this.send('response.content_part.done', { ...base, content_index: 0, part });
      Object.assign(it.item, { status, content: [part] });
    } else {
      this.send('response.function_call_arguments.done', { ...base, name: it.item.name, arguments: it.text });
      Object.assign(it.item, { status, arguments: it.text });
    }
    this.send('response.output_item.done', { output_index: it.outputIndex, item: structuredClone(it.item) });
  }

  /** The end of a generation: the final object (also sent as response.completed / response.incomplete). */
  finish(done: { finishReason: FinishReason; engine: EngineDone }): Record<string, unknown> {
    const cut = done.finishReason === 'length';
    // A reply with neither text nor calls is still one (empty) message, as clients expect.
    if (!this.output.some((i) => i.type === 'message' || i.type === 'function_call')) this.openItem('message');
    this.closeOpen(cut ? 'incomplete' : 'completed');
    const u = done.engine.usage;
    const reasoning = this.sawReasoning ? Math.min(u.completionTokens, this.reasoningSteps ?? u.completionTokens) : 0;
    const usage = {
      input_tokens: u.promptTokens,
      input_tokens_details: { cached_tokens: u.cachedTokens },
      output_tokens: u.completionTokens,
      output_tokens_details: { reasoning_tokens: reasoning },
      total_tokens: u.totalTokens,
    };
    const r = this.response(cut ? 'incomplete' : 'completed', usage, null, cut ? { reason: 'max_output_tokens' } : null);
    this.send(cut ? 'response.incomplete' : 'response.completed', { response: r });
    return r;
  }

  /** A failure after the stream started: an error event, then response.failed; the stream then ends. */
  fail(e: HttpError): Record<string, unknown> {
    this.closeOpen('incomplete');
    this.send('error', { code: e.code ?? e.type, message: e.message, param: e.param });
    const r = this.response('failed', null, { code: 'server_error', message: e.message });
    this.send('response.failed', { response: r });
    return r;
  }

  private response(status: string, usage: unknown, error: unknown, incomplete: unknown = null): Record<string, unknown> {
    const output = structuredClone(this.output);
    const text = output
      .filter((i) => i.type === 'message')
      .flatMap((i) => i.content as { type: string; text?: string }[])
      .map((p) => (p.type === 'output_text' ? (p.text ?? '') : ''))
      .join('');
    return { ...this.shell, status, error, incomplete_details: incomplete, output, output_text: text, usage };
  }
}
