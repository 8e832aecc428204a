// The chat-completions endpoint of --url: a server root, its /v1 base or the endpoint itself.

export function chatCompletionsUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new Error(`--url: "${url}" is not a URL`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`--url: expected http:// or https://, got "${url}"`);
  const path = u.pathname.replace(/\/+$/, '');
  if (path.endsWith('/chat/completions')) u.pathname = path;
  else if (path.endsWith('/v1')) u.pathname = `${path}/chat/completions`;
  else u.pathname = `${path}/v1/chat/completions`;
  return u.toString();
}

/** GET .../v1/models beside the chat endpoint. */
export function modelsUrl(chatUrl: string): string {
  const u = new URL(chatUrl);
  u.pathname = u.pathname.replace(/\/chat\/completions$/, '/models');
  return u.toString();
}
