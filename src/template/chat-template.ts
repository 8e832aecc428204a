// Chat template rendering with @huggingface/jinja, mirroring transformers' apply_chat_template:
// the same variables (messages, tools, add_generation_prompt, special tokens, extra kwargs).

import { Environment, Interpreter, Template } from '@huggingface/jinja';

export interface ChatContentPart {
  type: string;
  text?: string;
  [field: string]: unknown;
}

export interface ChatMessage {
  role: string;
  content: string | ChatContentPart[] | null;
  [field: string]: unknown;
}

export interface ChatRenderOptions {
  messages: readonly ChatMessage[];
  addGenerationPrompt?: boolean;
  /** Tool (function) definitions, passed to the template unchanged. */
  tools?: readonly unknown[];
  documents?: readonly unknown[];
  /** bos_token, eos_token, pad_token, unk_token, ... as strings. */
  specialTokens?: Readonly<Record<string, string>>;
  /** Extra template variables such as enable_thinking. */
  extra?: Readonly<Record<string, unknown>>;
}

export class ChatTemplateError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'ChatTemplateError';
  }
}

export class ChatTemplate {
  private readonly template: Template;

  constructor(readonly source: string, readonly name = 'default') {
    try {
      this.template = new Template(source);
    } catch (err) {
      throw new ChatTemplateError(`chat template "${name}" does not parse: ${(err as Error).message}`, { cause: err });
    }
  }

  render(options: ChatRenderOptions): string {
    const context: Record<string, unknown> = {
      ...(options.specialTokens ?? {}),
      ...(options.extra ?? {}),
      messages: options.messages,
      add_generation_prompt: options.addGenerationPrompt ?? false,
    };
    if (options.tools !== undefined) context['tools'] = options.tools;
    if (options.documents !== undefined) context['documents'] = options.documents;
    // Templates test `bos_token is defined` etc.; missing ones must stay undefined, not null.
    try {
      return renderBounded(this.template, context);
    } catch (err) {
      throw new ChatTemplateError(`chat template "${this.name}" failed to render: ${(err as Error).message}`, { cause: err });
    }
  }
}

/**
 * Picks a template like transformers: an explicit name, else "tool_use" when tools are given and
 * such a template exists, else "default". Returns null when the model has no chat template.
 */
export function selectChatTemplate(
  templates: Readonly<Record<string, string>>,
  options: { name?: string; hasTools?: boolean } = {},
): { name: string; source: string } | null {
  if (options.name !== undefined) {
    const source = templates[options.name];
    if (source === undefined) {
      throw new ChatTemplateError(`no chat template named "${options.name}" (have: ${Object.keys(templates).join(', ') || 'none'})`);
    }
    return { name: options.name, source };
  }
  if (options.hasTools === true && templates['tool_use'] !== undefined) return { name: 'tool_use', source: templates['tool_use'] };
  if (templates['default'] !== undefined) return { name: 'default', source: templates['default'] };
  const names = Object.keys(templates);
  if (names.length === 1) return { name: names[0]!, source: templates[names[0]!]! };
  return null;
}

/** The minimal tokenizer surface needed to encode a rendered prompt. */
export interface PromptEncoder {
  encode(text: string, options?: { addSpecialTokens?: boolean }): number[];
}

/**
 * Encodes a rendered chat prompt. Templates usually write the BOS token themselves; adding it again
 * would double it, so special tokens are only added when the text does not already start with it.
 */
export function encodeChatPrompt(tokenizer: PromptEncoder, rendered: string, bosToken: string | null): number[] {
  const hasBos = bosToken !== null && bosToken.length > 0 && rendered.startsWith(bosToken);
  return tokenizer.encode(rendered, { addSpecialTokens: !hasBos });
}

/** The most items a template's range() may make: a range(100000000) would allocate one array past the heap
 * limit, which kills the whole process (a worker's memory limit catches gradual growth, not that). */
export const TEMPLATE_RANGE_LIMIT = 100_000;

/**
 * Template.render with its globals declared here, so range() is bounded (the library's globals cannot be
 * replaced: a context key that names one throws, as before). The rest mirror @huggingface/jinja's own.
 */
function renderBounded(template: Template, context: Record<string, unknown>): string {
  const env = new Environment();
  const globals: Record<string, unknown> = {
    false: false, true: true, none: null, False: false, True: true, None: null,
    raise_exception: (message: unknown) => {
      throw new Error(String(message));
    },
    range: boundedRange,
    strftime_now: strftimeNow,
  };
  for (const [k, v] of Object.entries(globals)) env.set(k, v);
  for (const [k, v] of Object.entries(context)) env.set(k, v);
  return String(new Interpreter(env).run(template.parsed).value);
}

/** strftime_now(format): the directives chat templates use (%Y %m %d %b %B %H %M %%), as the library has them. */
function strftimeNow(format: string): string {
  const d = new Date();
  const pad2 = (n: number) => String(n).padStart(2, '0');
  return String(format).replace(/%[YmdbBHM%]/g, (t) => {
    switch (t) {
      case '%Y': return String(d.getFullYear());
      case '%m': return pad2(d.getMonth() + 1);
      case '%d': return pad2(d.getDate());
      case '%b': return new Intl.DateTimeFormat(undefined, { month: 'short' }).format(d);
      case '%B': return new Intl.DateTimeFormat(undefined, { month: 'long' }).format(d);
      case '%H': return pad2(d.getHours());
      case '%M': return pad2(d.getMinutes());
      default: return '%';
    }
  });
}

/** jinja's range() (Python's semantics), refusing ranges longer than TEMPLATE_RANGE_LIMIT. */
function boundedRange(start: number, stop?: number, step = 1): number[] {
  if (stop === undefined) [start, stop] = [0, start];
  if (step === 0) throw new Error('range() step must not be zero');
  const count = Math.max(0, Math.ceil((stop - start) / step));
  if (!(count <= TEMPLATE_RANGE_LIMIT)) throw new Error(`range() of ${count} items is over the chat template limit of ${TEMPLATE_RANGE_LIMIT}`);
  const out = new Array<number>(count);
  for (let i = 0; i < count; i++) out[i] = start + i * step;
  return out;
}
