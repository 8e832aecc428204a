// A small bounded pool of worker threads for image preprocessing (resize + normalize + patch layout,
// 0.3-0.7 s of CPU for a 2 MP image), so it never runs on the event loop that serves other streams.
// Bounded: a full queue refuses at once (503, retry later); every task has a deadline from submission,
// and a worker that overruns it is terminated and replaced, so no request can hang on preprocessing.

import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';

import { InvalidRequestError, EngineUnavailableError } from '../errors/request-errors.js';
import type { DecodedImage } from './decode-image.js';
import type { PreparedImage, PrepareImageOptions, PreprocessSpec } from './prepare-image.js';
import type { PreprocessReply, PreprocessRequest } from './preprocess-protocol.js';
import { compiledWorker } from '../compiled-worker.js';

export interface PreprocessPoolOptions {
  /** Worker threads (default: half the cores, 1 to 4). */
  threads?: number;
  /** Tasks allowed to wait for a free worker; more are refused (default 64). */
  maxQueue?: number;
  /** Deadline per task from submission, queue wait included (default 60 s). */
  timeoutMs?: number;
}

export interface PreprocessPoolStats {
  threads: number; // live workers
  busy: number;
  queued: number;
}

interface Task {
  id: number;
  request: PreprocessRequest;
  transfer: ArrayBuffer[];
  resolve: (r: PreparedImage) => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
  slot?: Slot;
}

interface Slot {
  worker: Worker;
  task: Task | null;
  dead: boolean;
}

const workerFile = (): URL => compiledWorker(import.meta.url, 'vision/preprocess-worker.js', 'image preprocessing worker');

export class PreprocessPool {
  readonly threads: number;
  readonly maxQueue: number;
  readonly timeoutMs: number;
  private readonly slots: Slot[] = [];
  private readonly queue: Task[] = [];
  private nextId = 1;
  private closed = false;
  private file: URL | undefined;

  constructor(options: PreprocessPoolOptions = {}) {
    this.threads = Math.max(1, Math.floor(options.threads ?? Math.min(4, Math.max(1, Math.floor(availableParallelism() / 2)))));
    this.maxQueue = Math.max(0, Math.floor(options.maxQueue ?? 64));
    this.timeoutMs = options.timeoutMs ?? 60_000;
  }

  /** prepareWithSpec(spec, img, options) on a worker; bit-identical to the in-thread result. */
  prepare(spec: PreprocessSpec, img: DecodedImage, options: PrepareImageOptions = {}): Promise<PreparedImage> {
    if (this.closed) return Promise.reject(new Error('the image preprocessing pool is closed'));
    try {
      this.file ??= workerFile();
    } catch (err) {
      return Promise.reject(err as Error);
    }
    const idle = this.slots.some((s) => s.task === null) || this.slots.length < this.threads;
    if (!idle && this.queue.length >= this.maxQueue) {
      return Promise.reject(
        new EngineUnavailableError(`image preprocessing is saturated (${this.queue.length} images waiting); retry shortly`, 'overloaded'),
      );
    }
    // A compact copy of the pixels, transferred: the caller's buffer (maybe a slice of a larger one) stays intact.
    const data = img.data.slice();
    const id = this.nextId++;
    const request: PreprocessRequest = { id, spec, image: { width: img.width, height: img.height, data }, options: { ...options } };
    return new Promise<PreparedImage>((resolve, reject) => {
      const task: Task = { id, request, transfer: [data.buffer as ArrayBuffer], resolve, reject, timer: undefined as unknown as NodeJS.Timeout };
      task.timer = setTimeout(() => this.expire(task), this.timeoutMs);
      this.queue.push(task);
      this.dispatch();
    });
  }

  stats(): PreprocessPoolStats {
    const live = this.slots.filter((s) => !s.dead);
    return { threads: live.length, busy: live.filter((s) => s.task !== null).length, queued: this.queue.length };
  }

  /** Terminates the workers; pending tasks are rejected. */
  async close(): Promise<void> {
    this.closed = true;
    const err = new Error('the image preprocessing pool was closed');
    for (const t of this.queue.splice(0)) this.finish(t, err);
    await Promise.all(
      this.slots.splice(0).map((s) => {
        s.dead = true;
        if (s.task !== null) this.finish(s.task, err);
        return s.worker.terminate();
      }),
    );
  }

  private dispatch(): void {
    while (this.queue.length > 0) {
      let slot = this.slots.find((s) => s.task === null && !s.dead);
      if (slot === undefined && this.slots.length < this.threads) slot = this.spawn();
      if (slot === undefined) return;
      const task = this.queue.shift()!;
      slot.task = task;
      task.slot = slot;
      slot.worker.ref();
      slot.worker.postMessage(task.request, task.transfer);
    }
  }

  private spawn(): Slot {
    // No inherited node flags: the worker is plain compiled JS, and flags like --input-type break it.
    const worker = new Worker(this.file!, { execArgv: [] });
    const slot: Slot = { worker, task: null, dead: false };
    worker.on('message', (reply: PreprocessReply) => {
      const task = slot.task;
      if (task === null || task.id !== reply.id) return;
      slot.task = null;
      worker.unref(); // an idle worker must not keep the process alive
      if (reply.ok) this.finish(task, null, reply.result);
      else if (reply.error.invalid) this.finish(task, new InvalidRequestError(reply.error.message, reply.error.param));
      else this.finish(task, new Error(`image preprocessing failed: ${reply.error.message}`));
      this.dispatch();
    });
    const lost = (why: string) => {
      if (slot.dead) return;
      this.retire(slot);
      if (slot.task !== null) this.finish(slot.task, new Error(`image preprocessing worker ${why}`));
      slot.task = null;
      this.dispatch();
    };
    worker.on('error', (err) => lost(`failed: ${err.message}`));
    worker.on('exit', (code) => lost(`exited with code ${code}`));
    this.slots.push(slot);
    return slot;
  }

  private retire(slot: Slot): void {
    slot.dead = true;
    const i = this.slots.indexOf(slot);
    if (i >= 0) this.slots.splice(i, 1);
  }

  private expire(task: Task): void {
    const err = new EngineUnavailableError(`image preprocessing did not finish within ${this.timeoutMs} ms; retry shortly`, 'overloaded');
    const q = this.queue.indexOf(task);
    if (q >= 0) {
      this.queue.splice(q, 1);
      this.finish(task, err);
      return;
    }
    const slot = task.slot;
    if (slot === undefined || slot.task !== task) return;
    // The worker is stuck on this task: replace it so the tasks behind it still run.
    this.retire(slot);
    slot.task = null;
    void slot.worker.terminate();
    this.finish(task, err);
    this.dispatch();
  }

  private finish(task: Task, err: Error | null, result?: PreparedImage): void {
    clearTimeout(task.timer);
    if (err !== null) task.reject(err);
    else task.resolve(result!);
  }
}

let shared: PreprocessPool | undefined;

/** The process-wide pool that the server and `rapid run --image` use (created on first use). */
export function preprocessPool(): PreprocessPool {
  shared ??= new PreprocessPool();
  return shared;
}
