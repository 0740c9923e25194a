//! `make bench`: the cost of decoding a streamed answer, per provider, natively.
//!
//! Each stream is built from that provider's recorded fixture: its opening frames, its recorded
//! text deltas cycled to 2,000 chunks, its closing frames. Every chunk arrives as its own
//! network read and goes through the whole path a real call takes (framing, JSON decoding,
//! message assembly, event emission). Prints nanoseconds and heap allocations per chunk.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use async_trait::async_trait;
use edge_agent::llm::providers::{Anthropic, Gemini, Ollama, OpenAiChat};
use edge_agent::llm::{
    ApiRequest, HttpRequest, HttpResponse, HttpTransport, LlmEvent, LlmRequest, ModelRef, Provider,
};

/// Counts allocations so the figure is exact, not sampled.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const CHUNKS: usize = 2_000;
const RUNS: usize = 30;

/// Serves one prepared copy of the chunks per call, one chunk per read. The copies are made
/// before timing starts, so the figures are the decoder's alone.
struct Replay(RefCell<Vec<Body>>);

/// One response body: its chunks as the transport yields them.
type Body = Vec<Result<Vec<u8>, String>>;

impl Replay {
    fn new(chunks: &[Vec<u8>]) -> Rc<Self> {
        let copies = (0..RUNS)
            .map(|_| chunks.iter().cloned().map(Ok).collect())
            .collect();
        Rc::new(Self(RefCell::new(copies)))
    }
}

#[async_trait(?Send)]
impl HttpTransport for Replay {
    async fn post(&self, _: HttpRequest) -> Result<HttpResponse, String> {
        let chunks = self.0.borrow_mut().pop().ok_or("no prepared copy left")?;
        Ok(HttpResponse {
            status: 200,
            headers: vec![],
            body: Box::pin(futures::stream::iter(chunks)),
        })
    }

    async fn get(&self, _: HttpRequest) -> Result<HttpResponse, String> {
        Err("not used by the benchmark".into())
    }

    async fn send(&self, _: ApiRequest) -> Result<HttpResponse, String> {
        Err("not used by the benchmark".into())
    }
}

fn read(path: &str) -> String {
    let full = format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// Head frames, the delta frames cycled to `CHUNKS` in all, tail frames.
fn stretch(frames: Vec<String>, is_delta: impl Fn(&str) -> bool) -> Vec<Vec<u8>> {
    let first = frames
        .iter()
        .position(|f| is_delta(f))
        .expect("no delta frame");
    let last = frames
        .iter()
        .rposition(|f| is_delta(f))
        .expect("no delta frame");
    let deltas: Vec<&String> = frames[first..=last]
        .iter()
        .filter(|f| is_delta(f))
        .collect();
    let (head, tail) = (&frames[..first], &frames[last + 1..]);
    let mut out: Vec<Vec<u8>> = head.iter().map(|f| f.clone().into_bytes()).collect();
    let fill = CHUNKS - head.len() - tail.len();
    out.extend(
        deltas
            .iter()
            .cycle()
            .take(fill)
            .map(|f| f.as_bytes().to_vec()),
    );
    out.extend(tail.iter().map(|f| f.clone().into_bytes()));
    out
}

fn sse_frames(body: &str, separator: &str) -> Vec<String> {
    body.split_inclusive(separator)
        .filter(|f| !f.trim().is_empty())
        .map(str::to_string)
        .collect()
}

fn bench(name: &str, provider: &dyn Provider, chunks: &[Vec<u8>]) {
    let request = LlmRequest {
        system: None,
        messages: &[],
        tools: &[],
        max_tokens: 1024,
        temperature: None,
        call_ids: "call_1_",
        billing: None,
        answer: None,
    };
    let bytes: usize = chunks.iter().map(Vec::len).sum();
    let mut best = f64::MAX;
    let mut allocs = 0;
    let mut events = 0;
    for _ in 0..RUNS {
        let mut count = 0usize;
        let before = ALLOCATIONS.load(Relaxed);
        let started = Instant::now();
        let completion =
            futures::executor::block_on(provider.stream(&request, &mut |_: &LlmEvent| count += 1));
        let elapsed = started.elapsed().as_nanos() as f64;
        allocs = ALLOCATIONS.load(Relaxed) - before;
        assert!(completion.error.is_none(), "{name}: {:?}", completion.error);
        best = best.min(elapsed);
        events = count;
    }
    println!(
        "{name:<10} {:>6} chunks {:>8} bytes {:>7} events {:>9.0} ns/chunk {:>6.2} allocs/chunk",
        chunks.len(),
        bytes,
        events,
        best / chunks.len() as f64,
        allocs as f64 / chunks.len() as f64
    );
}

fn main() {
    println!("decoding {CHUNKS}-chunk streams, one network read per chunk (best of {RUNS} runs; allocations counted exactly)");
    let model = |id| ModelRef::parse(id).unwrap();

    let frames = sse_frames(
        &read("anthropic/thinking-signature-delta-padded.sse"),
        "\n\n",
    );
    let chunks = stretch(frames, |f| f.contains("\"text_delta\""));
    let p = Anthropic::provider(
        model("anthropic:claude-sonnet-4-5"),
        None,
        None,
        Replay::new(&chunks),
    );
    bench("anthropic", &p, &chunks);

    let frames = sse_frames(&read("openai-chat/text-include-usage-done.sse"), "\n\n");
    let chunks = stretch(frames, |f| {
        f.contains("\"content\":\"") && !f.contains("\"content\":\"\"")
    });
    let p = OpenAiChat::provider(model("openai:gpt-4o"), None, None, Replay::new(&chunks));
    bench("openai", &p, &chunks);

    let frames = sse_frames(
        &read("gemini/thought-parts-then-text-signature-crlf.sse"),
        "\r\n\r\n",
    );
    let chunks = stretch(frames, |f| {
        f.contains("\"text\"") && !f.contains("\"thought\": true") && !f.contains("finishReason")
    });
    let p = Gemini::provider(
        model("gemini:gemini-2.5-pro"),
        None,
        None,
        Replay::new(&chunks),
    );
    bench("gemini", &p, &chunks);

    let lines: Vec<String> = read("ollama/chat-text-stream-tail-excerpt.ndjson")
        .lines()
        .map(|l| format!("{l}\n"))
        .collect();
    let chunks = stretch(lines, |l| l.contains("\"done\":false"));
    let p = Ollama::provider(model("ollama:phi3"), None, Replay::new(&chunks));
    bench("ollama", &p, &chunks);
}
