// Allocates fixed-size KV blocks of the native pool to sequences. The native side only ever sees
// block tables; which block belongs to whom lives here.
export class KvBlockAllocator {
  private readonly free: number[];

  constructor(
    readonly numBlocks: number,
    readonly blockSize: number,
  ) {
    // Pop from the end, so hand out low block ids first.
    this.free = Array.from({ length: numBlocks }, (_, i) => numBlocks - 1 - i);
  }

  get freeBlocks(): number {
    return this.free.length;
  }

  blocksFor(tokens: number): number {
    return Math.ceil(tokens / this.blockSize);
  }

  /** Grows `table` to cover `tokens` slots; returns false (allocating nothing) if the pool is short. */
  ensure(table: number[], tokens: number): boolean {
    const need = this.blocksFor(tokens) - table.length;
    if (need <= 0) return true;
    if (need > this.free.length) return false;
    for (let i = 0; i < need; i++) table.push(this.free.pop() as number);
    return true;
  }

  release(table: number[]): void {
    for (const b of table) this.free.push(b);
    table.length = 0;
  }
}
