//! etcd's simple tokens (`--auth-token simple`): a random prefix and the log index of
//! the authentication that made it, known to every member once that entry is applied,
//! and forgotten after `--auth-token-ttl` without use.
//!
//! Tokens live in memory only, as in etcd: a restarted member knows none, and clients
//! authenticate again. This module never logs a token and never decides who may do
//! what (that is `authorize`'s).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Letters of a token prefix, as etcd's `letters`.
const LETTERS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
/// etcd's `defaultSimpleTokenLength`.
const PREFIX_LENGTH: usize = 16;
/// Expired tokens are swept out every this many registrations.
const SWEEP_EVERY: u64 = 1024;

/// A new token prefix, from the process's secure random source.
pub fn new_prefix() -> String {
    // Bytes at or above the largest multiple of 52 are drawn again, so that every
    // letter is equally likely.
    let limit = (u8::MAX as usize + 1) / LETTERS.len() * LETTERS.len();
    let mut prefix = String::with_capacity(PREFIX_LENGTH);
    while prefix.len() < PREFIX_LENGTH {
        let byte = rand::random::<u8>() as usize;
        if byte < limit {
            prefix.push(LETTERS[byte % LETTERS.len()] as char);
        }
    }
    prefix
}

struct Held {
    user: String,
    deadline: Instant,
}

#[derive(Default)]
struct Table {
    tokens: HashMap<String, Held>,
    registered: u64,
}

/// The simple tokens this member knows.
pub struct SimpleTokens {
    ttl: Duration,
    table: Mutex<Table>,
}

impl SimpleTokens {
    pub fn new(ttl: Duration) -> Self {
        SimpleTokens {
            ttl,
            table: Mutex::default(),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a token an applied authentication made for `user`.
    pub fn register(&self, token: String, user: String) {
        let now = Instant::now();
        let mut table = self.table();
        table.registered += 1;
        if table.registered % SWEEP_EVERY == 0 {
            table.tokens.retain(|_, held| held.deadline > now);
        }
        table.tokens.insert(
            token,
            Held {
                user,
                deadline: now + self.ttl,
            },
        );
    }

    /// The user a live token stands for; using it keeps it alive for another TTL.
    pub fn user_of(&self, token: &str) -> Option<String> {
        let now = Instant::now();
        let mut table = self.table();
        let held = table.tokens.get_mut(token)?;
        if held.deadline <= now {
            table.tokens.remove(token);
            return None;
        }
        held.deadline = now + self.ttl;
        Some(held.user.clone())
    }

    /// Forgets every token of a user whose password changed or who was deleted.
    pub fn forget_user(&self, user: &str) {
        self.table().tokens.retain(|_, held| held.user != user);
    }

    /// Forgets every token (auth disabled).
    pub fn clear(&self) {
        self.table().tokens.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_sixteen_random_letters() {
        let a = new_prefix();
        assert_eq!(a.len(), PREFIX_LENGTH);
        assert!(a.bytes().all(|b| b.is_ascii_alphabetic()));
        assert_ne!(a, new_prefix());
    }

    #[test]
    fn a_token_lives_while_used_and_dies_when_idle() {
        let tokens = SimpleTokens::new(Duration::from_millis(200));
        tokens.register("p.1".into(), "alice".into());
        for _ in 0..4 {
            std::thread::sleep(Duration::from_millis(100));
            assert_eq!(tokens.user_of("p.1").as_deref(), Some("alice"));
        }
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(tokens.user_of("p.1"), None);
        assert_eq!(tokens.user_of("unknown"), None);
    }

    #[test]
    fn users_and_everyone_can_be_forgotten() {
        let tokens = SimpleTokens::new(Duration::from_secs(60));
        tokens.register("a.1".into(), "alice".into());
        tokens.register("b.2".into(), "bob".into());
        tokens.forget_user("alice");
        assert_eq!(tokens.user_of("a.1"), None);
        assert_eq!(tokens.user_of("b.2").as_deref(), Some("bob"));
        tokens.clear();
        assert_eq!(tokens.user_of("b.2"), None);
    }
}
