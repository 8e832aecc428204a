// The contract between a model family's tool-call format and the streaming driver
// (tool-call-stream.ts): a format names the markers that open a call region and rescans a region's
// text as it grows, reporting the calls found so far. The driver turns that into OpenAI deltas.

/** One call as a format sees it inside a region, at the current length of the region's text. */
export interface ScannedCall {
  /** Known once the model has written the whole name; never changes afterwards. */
  name?: string;
  /**
   * The arguments text: while not done, a prefix of what it will be (safe to stream); when done,
   * the final JSON text of an object.
   */
  args: string;
  done: boolean;
  /** The model wrote a call that does not parse: the region is not reported as calls (non-stream). */
  broken?: boolean;
}

export interface RegionScan {
  /** Calls in order; the list only grows between scans of the same region. */
  calls: ScannedCall[];
  /** Characters of the region the calls used, once the region is closed; null while open. */
  end: number | null;
  /** The text at the marker is not a call after all (only before any call has a name). */
  invalid?: boolean;
}

export interface ToolMarker {
  text: string;
  /** Counts only at the very start of the output (leading whitespace aside), e.g. a bare `{`. */
  startOnly?: boolean;
}

export interface ToolCallFormat {
  /** The registry name (also what `--tool-parser` style options would take). */
  readonly name: string;
  /** Its markers are special tokens: the detokenizer must keep special tokens for these requests. */
  readonly needsSpecialTokens: boolean;
  readonly markers: readonly ToolMarker[];
  /**
   * Scans a region that starts with one of the markers. `final`: no more text will come (the region
   * closes at its end if it can). Called again with a longer text after every delta.
   */
  scan(region: string, final: boolean): RegionScan;
}
