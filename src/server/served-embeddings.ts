// Whether and how a loaded model serves /v1/embeddings: an embedding model (no LM head) always, a
// generative decoder only when asked (rapid serve --embeddings: its pooled hidden states).
import type { ServedEmbeddings } from './embeddings-request.js';

export function servedEmbeddingsFrom(info: { hiddenSize: number; embeddingOnly?: boolean }, pooled: boolean): { embeddings?: ServedEmbeddings } {
  if (info.embeddingOnly === true) return { embeddings: { kind: 'model', size: info.hiddenSize } };
  return pooled ? { embeddings: { kind: 'pooled', size: info.hiddenSize } } : {};
}
