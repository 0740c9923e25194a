//! A turn's files, loaded from R2 for the model: history keeps only references, so before each
//! call the files the model is about to see get their contents, read once per turn. A file
//! that cannot be read (gone from R2, or past the turn's budget) becomes a note saying so.
//! And the files of messages no history will name (refused, repeated, dropped with their
//! queue), removed.

use std::cell::RefCell;
use std::collections::HashMap;

use async_trait::async_trait;
use base64::Engine;
use worker::console_error;

use crate::agent::{AgentMessage, ContextTransform};
use crate::edge::platform::files::Files;
use crate::llm::{Attachment, ContentBlock, FileData, FileKind, Message};

/// The most a turn holds of its files' bytes, and so the most one provider request inlines:
/// each is held base64 for the turn (4/3 of it), again in the request as it is written, and
/// once more as the runtime's copy being sent, so a call's peak is about four times this, well
/// within an isolate's 128 MB. The newest files are loaded first; older ones past it become
/// notes.
pub const MAX_TURN_FILE_BYTES: u64 = 16 << 20;

/// Why a file reached the model as a note.
type Unread = &'static str;

/// The most the turns of one isolate hold of their files' bytes together: conversation objects
/// share an isolate (and its 128 MB), so a turn whose file would pass it sends a note instead.
pub const MAX_ISOLATE_FILE_BYTES: u64 = 24 << 20;

thread_local! {
    /// The file bytes the isolate's turns hold now.
    static HELD: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

pub struct FileLoader {
    files: Files,
    loaded: RefCell<HashMap<String, Result<FileData, Unread>>>,
    /// What this turn counts in [`HELD`], given back when it ends.
    held: std::cell::Cell<u64>,
}

impl Drop for FileLoader {
    fn drop(&mut self) {
        let held = self.held.get();
        HELD.with(|h| h.set(h.get().saturating_sub(held)));
    }
}

impl FileLoader {
    pub fn new(files: Files) -> Self {
        Self {
            files,
            loaded: RefCell::default(),
            held: std::cell::Cell::new(0),
        }
    }

    /// Counts `size` bytes against the isolate's budget, unless they would pass it.
    fn hold(&self, size: u64) -> bool {
        HELD.with(|h| {
            if h.get() + size > MAX_ISOLATE_FILE_BYTES {
                return false;
            }
            h.set(h.get() + size);
            self.held.set(self.held.get() + size);
            true
        })
    }

    async fn load(&self, file: &Attachment) -> Result<FileData, Unread> {
        let bytes = match self.files.bytes(&file.id).await {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Err("it is no longer stored, so it is not shown"),
            Err(e) => {
                console_error!("reading file {}: {e}", file.id);
                return Err("it could not be read just now, so it is not shown");
            }
        };
        Ok(match file.kind() {
            FileKind::Text => {
                FileData::Text(file.framed_text(&String::from_utf8_lossy(&bytes)).into())
            }
            FileKind::Image | FileKind::Pdf => FileData::Base64(
                base64::engine::general_purpose::STANDARD
                    .encode(&bytes)
                    .into(),
            ),
        })
    }
}

#[async_trait(?Send)]
impl ContextTransform for FileLoader {
    async fn transform(&self, mut messages: Vec<Message>) -> Vec<Message> {
        // What is not loaded yet, newest first, within the turn's budget.
        let mut wanted: Vec<&Attachment> = Vec::new();
        let mut over: Vec<String> = Vec::new();
        {
            let loaded = self.loaded.borrow();
            let mut held: u64 = loaded
                .values()
                .map(|data| match data {
                    Ok(FileData::Base64(b)) => b.len() as u64 / 4 * 3,
                    Ok(FileData::Text(t)) => t.len() as u64,
                    Err(_) => 0,
                })
                .sum();
            for file in user_files(&messages).rev() {
                if loaded.contains_key(&file.id) || wanted.iter().any(|w| w.id == file.id) {
                    continue;
                }
                if held + file.size > MAX_TURN_FILE_BYTES {
                    over.push(file.id.clone());
                    continue;
                }
                held += file.size;
                wanted.push(file);
            }
        }
        // One after another: a file's bytes are dropped once encoded, before the next is read.
        let mut busy = Vec::new();
        for file in &wanted {
            if !self.hold(file.size) {
                // Not kept: the next call tries again.
                busy.push(file.id.clone());
                continue;
            }
            let data = self.load(file).await;
            self.loaded.borrow_mut().insert(file.id.clone(), data);
        }
        {
            let mut loaded = self.loaded.borrow_mut();
            for id in over {
                loaded.insert(
                    id,
                    Err("the turn's files are too large together, so this older one is not shown"),
                );
            }
        }
        let loaded = self.loaded.borrow();
        for message in messages.iter_mut() {
            let Message::User { content } = message else {
                continue;
            };
            for block in content.iter_mut() {
                let ContentBlock::File(file) = block else {
                    continue;
                };
                if file.data.is_some() {
                    continue;
                }
                match loaded.get(&file.id) {
                    Some(Ok(data)) => file.data = Some(data.clone()),
                    Some(Err(why)) => {
                        *block = ContentBlock::Text {
                            text: file.note(why),
                        }
                    }
                    None if busy.contains(&file.id) => {
                        *block = ContentBlock::Text {
                            text: file.note(
                                "other conversations' files fill this server's memory just now, \
                                 so it is not shown",
                            ),
                        }
                    }
                    None => {}
                }
            }
        }
        messages
    }
}

/// The files in the users' messages, oldest first.
fn user_files(messages: &[Message]) -> impl DoubleEndedIterator<Item = &Attachment> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::User { content } => Some(content),
            _ => None,
        })
        .flatten()
        .filter_map(|b| match b {
            ContentBlock::File(file) if file.data.is_none() => Some(file),
            _ => None,
        })
}

/// The ids of the files `messages` carry.
pub(crate) fn file_ids<'a>(messages: impl IntoIterator<Item = &'a AgentMessage>) -> Vec<String> {
    messages
        .into_iter()
        .flat_map(files_of)
        .map(|f| f.id.clone())
        .collect()
}

/// Removes files `ids` (of messages no history will name) from R2, then their records; best
/// effort: a failure is logged and left to the scheduled run's sweep.
pub(crate) async fn discard(turn_env: &super::TurnEnv, ids: &[String]) {
    let Some(bucket) = Files::from_env(&turn_env.env).filter(|_| !ids.is_empty()) else {
        return;
    };
    if let Err(e) = turn_env.store.discard_files(&bucket, ids).await {
        worker::console_error!("removing the files of messages no history will name: {e}");
    }
}

/// The files a user message carries.
pub(crate) fn files_of(message: &AgentMessage) -> impl Iterator<Item = &Attachment> {
    let content = match message {
        AgentMessage::User { content } => content.as_slice(),
        _ => &[],
    };
    content.iter().filter_map(|b| match b {
        ContentBlock::File(file) => Some(file),
        _ => None,
    })
}
