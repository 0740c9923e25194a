//! The token estimator over texts of each kind it counts apart: every LLM call estimates the
//! whole history, so its speed is paid per call on every character. Prints MB/s and the
//! estimate for each (best of a few runs).

use std::hint::black_box;
use std::time::Instant;

use edge_agent::agent::estimate::estimate_tokens;

const RUNS: usize = 20;

fn bench(name: &str, text: &str) {
    let mut best = f64::MAX;
    let mut tokens = 0;
    for _ in 0..RUNS {
        let started = Instant::now();
        tokens = estimate_tokens(black_box(text));
        best = best.min(started.elapsed().as_secs_f64());
    }
    println!(
        "{name:<12} {:>9} bytes {:>8} tokens estimated {:>8.0} MB/s",
        text.len(),
        tokens,
        text.len() as f64 / best / 1e6
    );
}

fn main() {
    println!("estimating tokens of 1 MB texts (best of {RUNS} runs)");
    let size = 1 << 20;
    let fill = |piece: &str| piece.repeat(size / piece.len());
    bench(
        "prose",
        &fill("The quick brown fox jumps over the lazy dog, then rests. "),
    );
    bench(
        "code",
        &fill("    if let Some(x) = map.get(&key) { total += x * 2; }\n"),
    );
    bench(
        "json",
        &fill(r#"{"id":1732752000,"lat":48.8566,"ok":true},"#),
    );
    bench("digits", &fill("31415926535897932384626433832795"));
    bench("cjk", &fill("你好世界，今天天气很好。"));
    bench(
        "mixed",
        &fill("Prix: 12,50 € — café crème 🙂 naïve résumé. "),
    );
}
