/** Text made safe for HTML, in element content and in quoted attributes alike. */
export function escapeHtml(value: unknown): string {
  return String(value)
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

/** A tagged template whose interpolations are escaped, except those already built with it. */
export function html(strings: TemplateStringsArray, ...values: unknown[]): Html {
  let out = strings[0] ?? '';
  values.forEach((value, index) => {
    out += render(value) + (strings[index + 1] ?? '');
  });
  return new Html(out);
}

/** Markup that is already safe. */
export class Html {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

function render(value: unknown): string {
  if (value instanceof Html) return value.text;
  if (Array.isArray(value)) return value.map(render).join('');
  if (value === undefined || value === null || value === false) return '';
  return escapeHtml(value);
}

/** A date as the page shows it (UTC, to the second), or a dash. */
export function when(date: Date | null | undefined): string {
  return date ? `${date.toISOString().slice(0, 19).replace('T', ' ')} UTC` : '—';
}

/** The whole page around `body`. */
export function layout(title: string, base: string, body: Html): string {
  return `<!doctype html>${
    html`<html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>${title} · payment notifications</title>
        <link rel="stylesheet" href="${base}/admin.css" />
      </head>
      <body>
        <header><a href="${base}/">${title}</a> <span>payment notifications</span></header>
        <main>${body}</main>
      </body>
    </html>`.text
  }`;
}

/** The page's only style sheet, served by the router itself (no CDN, no build step). */
export const STYLE = `
*{box-sizing:border-box}body{margin:0;font:15px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:#1d2330;background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:.7rem 1rem}header a{color:#fff;font-weight:600;text-decoration:none}header span{opacity:.7;margin-left:.4rem}
main{max-width:1100px;margin:0 auto;padding:1rem}h1{font-size:1.3rem;margin:.2rem 0 1rem}h2{font-size:1.05rem;margin:1.4rem 0 .6rem}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(130px,1fr));gap:.6rem}
.card{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:.6rem .8rem}.card b{display:block;font-size:1.4rem}.card small{color:#5b6475}
table{width:100%;border-collapse:collapse;background:#fff;border:1px solid #dde1e7;border-radius:8px;overflow:hidden}
th,td{text-align:left;padding:.45rem .6rem;border-bottom:1px solid #eceff3;vertical-align:top;word-break:break-word}th{background:#f0f2f5;font-weight:600;font-size:.85rem;word-break:normal}
.wrap{overflow-x:auto}form.filters{display:flex;flex-wrap:wrap;gap:.5rem;align-items:end;background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:.7rem;margin-bottom:.8rem}
label{display:flex;flex-direction:column;font-size:.8rem;color:#5b6475;gap:.15rem}input,select{font:inherit;padding:.35rem .45rem;border:1px solid #c7ccd5;border-radius:6px;min-width:0}
button,.button{font:inherit;background:#2456c7;color:#fff;border:0;border-radius:6px;padding:.45rem .8rem;cursor:pointer;text-decoration:none;display:inline-block}
.button.secondary,button.secondary{background:#e6e9ef;color:#1d2330}.danger{background:#b3261e}
.status{display:inline-block;border-radius:99px;padding:0 .5rem;font-size:.8rem;font-weight:600}
.status-received{background:#e3ecff;color:#2456c7}.status-delivered{background:#dff3e6;color:#1c7a3d}.status-failed{background:#fff1d6;color:#8a5a00}.status-dead{background:#fde2e0;color:#b3261e}
.conflict{background:#fde2e0;color:#b3261e}.kept-unexpected{background:#fff1d6;color:#8a5a00}
.notice{background:#fff;border-left:4px solid #2456c7;padding:.6rem .8rem;margin:.8rem 0}.notice.bad{border-color:#b3261e}
pre{background:#fff;border:1px solid #dde1e7;border-radius:8px;padding:.7rem;overflow-x:auto;font-size:.85rem}
.actions{display:flex;flex-wrap:wrap;gap:.5rem;margin:.6rem 0}nav.pages{display:flex;gap:.5rem;margin:.6rem 0}
@media (max-width:640px){th.optional,td.optional{display:none}}
`;
