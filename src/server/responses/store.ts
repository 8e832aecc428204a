// Stored responses for previous_response_id, item_reference and GET/DELETE /v1/responses/{id}:
// in memory, bounded by count and by bytes, least recently used evicted first. A response that
// alone exceeds the byte bound is not kept (its id then answers 404, as an evicted one does).

/** The store's bounds: one place. Bytes are the stored JSON's length (images in inputs included). */
export const RESPONSE_STORE_LIMITS = {
  maxResponses: 1000,
  maxBytes: 64 * 1024 * 1024,
} as const;

export interface ResponseStoreLimits {
  maxResponses: number;
  maxBytes: number;
}

/** An input or output item in the Responses shape (validated before it is stored). */
export type ResponseItem = Record<string, unknown>;

export interface StoredResponse {
  /** The response object as the client received it. */
  response: Record<string, unknown>;
  /** The whole conversation before this response's output: earlier turns' items, then this request's input (instructions excluded). */
  input: ResponseItem[];
}

interface Entry extends StoredResponse {
  bytes: number;
}

export class ResponseStore {
  private readonly entries = new Map<string, Entry>(); // insertion order = recency (oldest first)
  /** Item id -> the response whose input or output holds it (item_reference). */
  private readonly itemOwners = new Map<string, string>();
  private bytes = 0;
  readonly limits: ResponseStoreLimits;

  constructor(limits: Partial<ResponseStoreLimits> = {}) {
    this.limits = { ...RESPONSE_STORE_LIMITS, ...limits };
  }

  get size(): number {
    return this.entries.size;
  }

  get totalBytes(): number {
    return this.bytes;
  }

  /** Keeps a finished response; false when it alone is larger than the byte bound. */
  put(id: string, stored: StoredResponse): boolean {
    this.delete(id);
    const bytes = Buffer.byteLength(JSON.stringify(stored));
    if (bytes > this.limits.maxBytes) return false;
    while (this.entries.size > 0 && (this.entries.size >= this.limits.maxResponses || this.bytes + bytes > this.limits.maxBytes)) {
      this.delete(this.entries.keys().next().value!);
    }
    this.entries.set(id, { ...stored, bytes });
    this.bytes += bytes;
    for (const item of this.itemsOf(stored)) this.itemOwners.set(item.id as string, id);
    return true;
  }

  /** The stored response, now the most recently used; undefined when unknown or evicted. */
  get(id: string): StoredResponse | undefined {
    const e = this.entries.get(id);
    if (!e) return undefined;
    this.entries.delete(id);
    this.entries.set(id, e);
    return e;
  }

  delete(id: string): boolean {
    const e = this.entries.get(id);
    if (!e) return false;
    this.entries.delete(id);
    this.bytes -= e.bytes;
    for (const item of this.itemsOf(e)) if (this.itemOwners.get(item.id as string) === id) this.itemOwners.delete(item.id as string);
    return true;
  }

  /** An input or output item of a stored response, by its id. */
  item(itemId: string): ResponseItem | undefined {
    const owner = this.itemOwners.get(itemId);
    const e = owner === undefined ? undefined : this.get(owner);
    if (!e) return undefined;
    return this.itemsOf(e).find((i) => i.id === itemId);
  }

  private itemsOf(s: StoredResponse): ResponseItem[] {
    const output = Array.isArray(s.response.output) ? (s.response.output as ResponseItem[]) : [];
    return [...s.input, ...output].filter((i) => typeof i.id === 'string');
  }
}
