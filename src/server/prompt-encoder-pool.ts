// A small pool of worker threads that render chat templates and tokenize prompts for the served model,
// so a huge prompt, a 100,000-message chat or a template that loops never runs on the event loop that
// answers /health and streams other requests. Each task has a time limit from when a worker takes it:
// a worker that overruns it is terminated and replaced, and only that request fails (400 naming the
// limit). Bounded: a full queue refuses at once (503). At start, one worker renders a one-message chat
// so a template that throws or hangs is reported when the model loads, not on the first request.

import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';

import { EngineUnavailableError } from '../errors/request-errors.js';
import type { ChatMessage } from '../template/chat-template.js';
import { badRequest, HttpError } from './http-errors.js';
import type { ImageLayout, ImageShape, PromptEncoderInit, PromptEncoderReady, PromptReply, PromptTask } from './prompt-encoder-protocol.js';
import { REQUEST_LIMITS } from './request-limits.js';
import { compiledWorker } from '../compiled-worker.js';

export interface PromptEncoderOptions {
  contextLength: number;
  /** Expand image placeholders (the model has a vision tower). */
  vision?: boolean;
  /** Worker threads (default: half the cores, 2 to 4). */
  threads?: number;
  /** Time one task may run on a worker (default REQUEST_LIMITS.promptTimeMs). */
  timeLimitMs?: number;
  /** Tasks allowed to wait for a free worker; more are refused (default 256). */
  maxQueue?: number;
  /** How long a task may wait for a worker before it is refused as overload (default 60 s). */
  queueTimeoutMs?: number;
  /** V8 heap of each worker: a template that builds a huge list fails its request, not the process. */
  maxHeapMb?: number;
}

export interface EncodedPrompt {
  promptIds: number[];
  /** Present for a chat with images. */
  layout?: ImageLayout;
}

type TaskBody = PromptTask extends infer T ? (T extends { id: number } ? Omit<T, 'id'> : never) : never;

interface Task {
  request: PromptTask;
  resolve: (r: EncodedPrompt) => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout; // queue wait, then run time
  slot?: Slot;
}

interface Slot {
  worker: Worker;
  ready: boolean;
  task: Task | null;
  dead: boolean;
}

const workerFile = (): URL => compiledWorker(import.meta.url, 'server/prompt-encoder-worker.js', 'prompt encoder worker');

/** Image parts carry the loaded image (pixels) for the engine; the template only needs their type. */
function withoutImageData(m: ChatMessage): ChatMessage {
  if (!Array.isArray(m.content) || !m.content.some((p) => p.type === 'image')) return m;
  return { ...m, content: m.content.map((p) => (p.type === 'image' ? { type: 'image' } : p)) };
}

/** The worker's first message: it has loaded the model's text side, or failed to. */
function readyOf(slot: Slot): Promise<PromptEncoderReady> {
  return new Promise<PromptEncoderReady>((resolve) => {
    slot.worker.once('message', (m: PromptEncoderReady) => resolve(m));
    slot.worker.once('error', (err) => resolve({ type: 'ready', ok: false, message: err.message }));
  });
}

const SMOKE_CHAT: ChatMessage[] = [{ role: 'user', content: 'Hello' }];

export class PromptEncoderPool {
  readonly threads: number;
  readonly timeLimitMs: number;
  readonly maxQueue: number;
  readonly queueTimeoutMs: number;
  /** UTF-8 bytes one token covers at most (null: no bound for this tokenizer). */
  maxBytesPerToken: number | null = null;
  hasTemplate = false;
  private readonly init: PromptEncoderInit;
  private readonly file: URL;
  private readonly maxHeapMb: number;
  private readonly slots: Slot[] = [];
  private readonly queue: Task[] = [];
  private nextId = 1;
  private closed = false;
  private broken: Error | null = null; // a replacement worker could not load the model's text side

  private constructor(dir: string, options: PromptEncoderOptions) {
    this.threads = Math.max(1, Math.floor(options.threads ?? Math.min(4, Math.max(2, Math.floor(availableParallelism() / 2)))));
    this.timeLimitMs = options.timeLimitMs ?? REQUEST_LIMITS.promptTimeMs;
    this.maxQueue = Math.max(0, Math.floor(options.maxQueue ?? 256));
    this.queueTimeoutMs = options.queueTimeoutMs ?? 60_000;
    this.maxHeapMb = options.maxHeapMb ?? 1024;
    this.init = { dir, contextLength: options.contextLength, vision: options.vision ?? false };
    this.file = workerFile();
  }

  /** Starts one worker and renders a one-message chat on it; throws a message naming what is wrong. */
  static async start(dir: string, options: PromptEncoderOptions): Promise<PromptEncoderPool> {
    const pool = new PromptEncoderPool(dir, options);
    const ready = await readyOf(pool.spawn());
    if (!ready.ok) {
      await pool.close();
      throw new Error(`cannot load the tokenizer or chat template of ${dir}: ${ready.message}`);
    }
    pool.maxBytesPerToken = ready.maxBytesPerToken;
    pool.hasTemplate = ready.hasTemplate;
    if (ready.hasTemplate) {
      try {
        await pool.encodeChat(SMOKE_CHAT);
      } catch (err) {
        await pool.close();
        const why = err instanceof HttpError && err.code === 'prompt_time_limit'
          ? `did not finish rendering a one-message chat within ${pool.timeLimitMs} ms (does it loop, e.g. over range(100000000)?)`
          : `fails on a one-message chat: ${(err as Error).message}`;
        throw new Error(`the chat template of ${dir} ${why}; fix chat_template in tokenizer_config.json (or chat_template.jinja)`);
      }
    }
    // The others load now, not in the first busy moment (a tokenizer takes 0.1-0.5 s to load).
    const more: Promise<PromptEncoderReady>[] = [];
    while (pool.slots.length < pool.threads) more.push(readyOf(pool.spawn()));
    await Promise.all(more);
    return pool;
  }

  /** Renders `messages` with the chat template (generation prompt appended) and tokenizes the result;
   * `images` (in prompt order) have their placeholders expanded. addGenerationPrompt false: /tokenize's option. */
  encodeChat(messages: ChatMessage[], templateArgs?: Record<string, unknown>, images?: ImageShape[], options: { addGenerationPrompt?: boolean } = {}): Promise<EncodedPrompt> {
    return this.submit({
      kind: 'chat',
      messages: messages.map(withoutImageData),
      ...(templateArgs !== undefined ? { templateArgs } : {}),
      ...(images !== undefined ? { images } : {}),
      ...(options.addGenerationPrompt !== undefined ? { addGenerationPrompt: options.addGenerationPrompt } : {}),
    });
  }

  /** Tokenizes raw text as a completion prompt (special tokens as the tokenizer adds them, unless addSpecialTokens is false). */
  async encodeText(text: string, options: { addSpecialTokens?: boolean } = {}): Promise<number[]> {
    return (await this.submit({ kind: 'text', text, ...(options.addSpecialTokens !== undefined ? { addSpecialTokens: options.addSpecialTokens } : {}) })).promptIds;
  }

  /** Terminates the workers; pending tasks are rejected. */
  async close(): Promise<void> {
    this.closed = true;
    const err = new Error('the prompt encoder was closed');
    for (const t of this.queue.splice(0)) this.finish(t, err);
    await Promise.all(
      this.slots.splice(0).map((s) => {
        s.dead = true;
        if (s.task !== null) this.finish(s.task, err);
        return s.worker.terminate();
      }),
    );
  }

  private submit(body: TaskBody): Promise<EncodedPrompt> {
    if (this.closed) return Promise.reject(new Error('the prompt encoder is closed'));
    if (this.broken !== null) return Promise.reject(this.broken);
    const idle = this.slots.some((s) => s.task === null) || this.slots.length < this.threads;
    if (!idle && this.queue.length >= this.maxQueue) {
      return Promise.reject(new EngineUnavailableError(`prompt encoding is saturated (${this.queue.length} prompts waiting); retry shortly`, 'overloaded'));
    }
    const request = { ...body, id: this.nextId++ } as PromptTask;
    return new Promise<EncodedPrompt>((resolve, reject) => {
      const task: Task = { request, resolve, reject, timer: undefined as unknown as NodeJS.Timeout };
      task.timer = setTimeout(() => this.expire(task), this.queueTimeoutMs);
      this.queue.push(task);
      this.dispatch();
    });
  }

  private dispatch(): void {
    while (this.queue.length > 0) {
      let slot = this.slots.find((s) => s.ready && s.task === null && !s.dead);
      if (slot === undefined) {
        if (this.slots.length < this.threads) this.spawn();
        return; // a new worker dispatches when it is ready
      }
      const task = this.queue.shift()!;
      clearTimeout(task.timer);
      task.timer = setTimeout(() => this.expire(task), this.timeLimitMs);
      slot.task = task;
      task.slot = slot;
      slot.worker.ref();
      slot.worker.postMessage(task.request);
    }
  }

  private spawn(): Slot {
    // No inherited node flags: the worker is plain compiled JS, and flags like --input-type break it.
    const worker = new Worker(this.file, { execArgv: [], workerData: this.init, resourceLimits: { maxOldGenerationSizeMb: this.maxHeapMb } });
    const slot: Slot = { worker, ready: false, task: null, dead: false };
    worker.unref();
    worker.on('message', (msg: PromptEncoderReady | PromptReply) => {
      if (msg.type === 'ready') {
        slot.ready = msg.ok;
        if (!msg.ok) {
          this.broken = new Error(`the prompt encoder cannot load the model's tokenizer: ${msg.message}`);
          for (const t of this.queue.splice(0)) this.finish(t, this.broken);
        }
        this.dispatch();
        return;
      }
      const task = slot.task;
      if (task === null || task.request.id !== msg.id) return;
      slot.task = null;
      worker.unref(); // an idle worker must not keep the process alive
      if (msg.ok) this.finish(task, null, { promptIds: Array.from(msg.promptIds), ...(msg.layout !== undefined ? { layout: msg.layout } : {}) });
      else if (msg.error.kind === 'internal') this.finish(task, new Error(`encoding the prompt failed: ${msg.error.message}`));
      else if (msg.error.kind === 'template') this.finish(task, badRequest(msg.error.message, 'messages', 'chat_template_error'));
      else this.finish(task, badRequest(msg.error.message, msg.error.param ?? null, msg.error.code ?? 'invalid_value'));
      this.dispatch();
    });
    const lost = (err: Error | null, why: string) => {
      if (slot.dead) return;
      this.retire(slot);
      const task = slot.task;
      slot.task = null;
      if (task !== null) {
        const oom = (err as { code?: string } | null)?.code === 'ERR_WORKER_OUT_OF_MEMORY';
        this.finish(task, oom
          ? badRequest(`rendering and tokenizing the prompt needed more than the prompt worker's ${this.maxHeapMb} MiB of memory`, 'messages', 'prompt_too_large')
          : new Error(`the prompt encoder worker ${why}`));
      }
      this.dispatch();
    };
    worker.on('error', (err) => lost(err, `failed: ${err.message}`));
    worker.on('exit', (code) => lost(null, `exited with code ${code}`));
    this.slots.push(slot);
    return slot;
  }

  private retire(slot: Slot): void {
    slot.dead = true;
    const i = this.slots.indexOf(slot);
    if (i >= 0) this.slots.splice(i, 1);
  }

  private expire(task: Task): void {
    const q = this.queue.indexOf(task);
    if (q >= 0) {
      this.queue.splice(q, 1);
      this.finish(task, new EngineUnavailableError(`no prompt encoder was free within ${this.queueTimeoutMs} ms; retry shortly`, 'overloaded'));
      return;
    }
    const slot = task.slot;
    if (slot === undefined || slot.task !== task) return;
    // The worker is stuck on this task (a looping template): replace it so the tasks behind it still run.
    this.retire(slot);
    slot.task = null;
    void slot.worker.terminate();
    this.finish(task, badRequest(
      `rendering the chat template and tokenizing the prompt took longer than the prompt time limit of ${this.timeLimitMs} ms; shorten the prompt or simplify the template`,
      'messages',
      'prompt_time_limit',
    ));
    this.dispatch();
  }

  private finish(task: Task, err: Error | null, result?: EncodedPrompt): void {
    clearTimeout(task.timer);
    if (err !== null) task.reject(err);
    else task.resolve(result!);
  }
}
