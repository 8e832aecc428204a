// The `rapid chat` screen: the transcript (printed once, it scrolls like any terminal output), the
// streaming reply, the input line and the status line. Ctrl-C stops a reply; twice at the prompt exits.
import { createElement as h, useCallback, useRef, useState, type ReactElement } from 'react';
import { Box, Static, useApp, useInput } from 'ink';
import type { ChatSession } from '../chat-session.js';
import { PromptLine } from './prompt-line.js';
import { ReplyView } from './reply-view.js';
import { StatusLine } from './status-line.js';
import { TranscriptEntry, type Entry } from './transcript-entry.js';

export interface ChatAppProps {
  session: ChatSession;
  maxTokens: number;
  temperature?: number;
  /** Lines shown first (the model and how to get help). */
  greeting: string;
}

export function ChatApp({ session, maxTokens, temperature, greeting }: ChatAppProps): ReactElement {
  const { exit } = useApp();
  const nextId = useRef(1);
  const [entries, setEntries] = useState<Entry[]>([{ id: 0, kind: 'notice', text: greeting }]);
  // Keys can arrive faster than renders: the line lives in a ref, the state only redraws it.
  const line = useRef('');
  const [input, setInputState] = useState('');
  const setInput = (v: string) => {
    line.current = v;
    setInputState(v);
  };
  const [reply, setReply] = useState<string | null>(null);
  const [hint, setHint] = useState<string | null>(null);
  const [speed, setSpeed] = useState<number | null>(null);
  const [, redraw] = useState(0);
  const abort = useRef<AbortController | null>(null);
  const armed = useRef(false); // a Ctrl-C at the prompt arms the exit; the next one exits

  const add = useCallback((e: Omit<Entry, 'id'>) => setEntries((list) => [...list, { ...e, id: nextId.current++ }]), []);

  const send = useCallback(
    async (text: string) => {
      const { user, turns } = session.withMessage(text);
      add({ kind: 'user', text, note: user.images ? `[${user.images.length} image${user.images.length > 1 ? 's' : ''}]` : undefined });
      const ac = new AbortController();
      abort.current = ac;
      setReply('');
      let out = '';
      let finish = 'abort';
      let used: number | null = null;
      try {
        for await (const ev of session.backend.reply(turns, { signal: ac.signal, maxTokens, temperature, schema: session.schema?.value })) {
          if (ev.type === 'delta') {
            out += ev.text;
            setReply(out);
          } else {
            finish = ev.finishReason;
            setSpeed(ev.tokensPerSecond);
            used = ev.promptTokens + ev.completionTokens;
          }
        }
        if (ac.signal.aborted) finish = 'abort';
        session.commit(user, out, used);
        add({ kind: 'assistant', text: out, note: finish === 'abort' ? '[stopped]' : finish === 'length' ? '[cut at the token limit]' : undefined });
      } catch (err) {
        // The message is not kept: the conversation stays as it was before it.
        add({ kind: 'error', text: (err as Error).message });
      } finally {
        abort.current = null;
        setReply(null);
        redraw((n) => n + 1);
      }
    },
    [session, maxTokens, temperature, add],
  );

  const submit = (text: string) => {
    if (abort.current) {
      setInput(text); // a reply is streaming: keep the line; Enter sends it when the reply ends
      return;
    }
    setInput('');
    if (text.trim() === '') return;
    const action = session.handle(text);
    if (action.kind === 'quit') return exit();
    if (action.kind === 'send') void send(action.text);
    else add({ kind: action.kind, text: action.text });
    redraw((n) => n + 1);
  };

  useInput((ch, key) => {
    if (key.ctrl && ch === 'c') {
      if (abort.current) {
        abort.current.abort();
        return;
      }
      if (armed.current || line.current === '') {
        if (armed.current) return exit();
        armed.current = true;
        setHint('Ctrl-C again to quit');
        return;
      }
      setInput('');
      return;
    }
    armed.current = false;
    setHint(null);
    if (key.ctrl && ch === 'd' && line.current === '' && !abort.current) return exit();
    if (key.return) return submit(line.current);
    if (key.backspace || key.delete) {
      setInput(line.current.slice(0, -1));
      return;
    }
    if (key.ctrl || key.meta || key.escape || key.upArrow || key.downArrow || key.leftArrow || key.rightArrow || key.tab) return;
    // Fast typing or a paste arrives in one piece, Enters included: each line break sends a line.
    const lines = ch.split(/\r\n|\r|\n/);
    for (const part of lines.slice(0, -1)) submit(line.current + part);
    setInput(line.current + lines[lines.length - 1]!);
  });

  const busy = reply !== null;
  return h(
    Box,
    { flexDirection: 'column' },
    h(Static, { items: entries, children: (e: unknown) => h(TranscriptEntry, { key: (e as Entry).id, entry: e as Entry }) }),
    busy ? h(ReplyView, { text: reply }) : null,
    h(Box, { marginTop: 1 }, h(PromptLine, { value: input, busy })),
    h(StatusLine, {
      s: {
        model: session.backend.model,
        busy,
        tokensPerSecond: speed,
        contextUsed: session.contextUsed,
        contextLength: session.backend.contextLength,
        schema: session.schema?.file ?? null,
        images: session.pendingImages.length,
        hint,
      },
    }),
  );
}
