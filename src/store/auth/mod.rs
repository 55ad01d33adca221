//! The auth store's records (etcd's `auth`, `authUsers` and `authRoles` buckets), kept
//! in the `meta` column family so that they survive restarts and travel in raft
//! snapshots, and the applied [`AuthState`] every request is authorised against.
//!
//! Records change only through an applied `Auth` command; the state in memory is
//! reloaded from `meta` after every such change and every snapshot install, and never
//! changed anywhere else. What a change means is [`state`]'s; this module only
//! stores it and never looks at who asks.

pub mod error;
pub mod permissions;
pub mod state;

use std::sync::{Arc, RwLock};

use prost::Message;
use rocksdb::WriteBatch;

use self::state::{AuthState, Change};
use super::{RevisionStore, StoreError, CF_META};
use crate::proto::authpb::{Role, User};
use crate::proto::command::auth_command::Request as AuthRequest;
use crate::proto::command::AuthResult;

const ENABLED_KEY: &[u8] = b"auth/enabled";
const REVISION_KEY: &[u8] = b"auth/revision";
const USER_PREFIX: &[u8] = b"auth/user/";
const ROLE_PREFIX: &[u8] = b"auth/role/";

fn record_key(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    let mut key = prefix.to_vec();
    key.extend_from_slice(name);
    key
}

/// The applied auth state, swapped whole on every reload.
#[derive(Default)]
pub(super) struct AuthCache {
    current: RwLock<Arc<AuthState>>,
    /// The state before the last reload, for the planted `StaleAuthRevision` only.
    #[cfg(feature = "planted-bugs")]
    previous: RwLock<Arc<AuthState>>,
}

fn read(slot: &RwLock<Arc<AuthState>>) -> Arc<AuthState> {
    match slot.read() {
        Ok(state) => state.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}

impl AuthCache {
    fn get(&self) -> Arc<AuthState> {
        read(&self.current)
    }

    fn set(&self, state: AuthState) {
        let state = Arc::new(state);
        let mut slot = match self.current.write() {
            Ok(slot) => slot,
            Err(poisoned) => poisoned.into_inner(),
        };
        #[cfg(feature = "planted-bugs")]
        if let Ok(mut previous) = self.previous.write() {
            *previous = slot.clone();
        }
        *slot = state;
    }
}

/// The auth records as etcd's snapshot buckets hold them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AuthRecords {
    pub enabled: bool,
    pub revision: u64,
    pub users: Vec<User>,
    pub roles: Vec<Role>,
}

impl RevisionStore {
    /// The auth state as applied so far: cheap, taken by every authorised request.
    pub fn auth(&self) -> Arc<AuthState> {
        self.auth.get()
    }

    /// The auth state before the last applied auth change (planted `StaleAuthRevision`).
    #[cfg(feature = "planted-bugs")]
    pub fn auth_before_last_change(&self) -> Arc<AuthState> {
        read(&self.auth.previous)
    }

    /// Every stored auth record, as of `snapshot` if given.
    pub(super) fn read_auth_records(
        &self,
        snapshot: Option<&rocksdb::Snapshot<'_>>,
    ) -> Result<AuthRecords, StoreError> {
        let cf = self.cf(CF_META)?;
        let options = || {
            let mut options = rocksdb::ReadOptions::default();
            if let Some(snapshot) = snapshot {
                options.set_snapshot(snapshot);
            }
            options
        };
        let enabled = self
            .db
            .get_pinned_cf_opt(cf, ENABLED_KEY, &options())?
            .is_some_and(|v| v.as_ref() == [1]);
        let revision = match self.db.get_pinned_cf_opt(cf, REVISION_KEY, &options())? {
            Some(raw) => u64::from_be_bytes(
                raw.as_ref()
                    .try_into()
                    .map_err(|_| StoreError::corrupt("bad auth revision record"))?,
            ),
            None => 0,
        };
        let list = |prefix: &[u8]| -> Result<Vec<Vec<u8>>, StoreError> {
            let mut found = Vec::new();
            let iter = self.db.iterator_cf_opt(
                cf,
                options(),
                rocksdb::IteratorMode::From(prefix, rocksdb::Direction::Forward),
            );
            for item in iter {
                let (key, value) = item?;
                if !key.starts_with(prefix) {
                    break;
                }
                found.push(value.to_vec());
            }
            Ok(found)
        };
        let corrupt = |_| StoreError::corrupt("bad auth record");
        let users = list(USER_PREFIX)?
            .iter()
            .map(|raw| User::decode(raw.as_slice()).map_err(corrupt))
            .collect::<Result<_, _>>()?;
        let roles = list(ROLE_PREFIX)?
            .iter()
            .map(|raw| Role::decode(raw.as_slice()).map_err(corrupt))
            .collect::<Result<_, _>>()?;
        Ok(AuthRecords {
            enabled,
            // A store that never had auth is at etcd's first revision.
            revision: revision.max(1),
            users,
            roles,
        })
    }

    /// Reads the auth records into memory: at startup, after an applied auth change
    /// and after a snapshot install or import.
    pub(super) fn reload_auth(&self) -> Result<(), StoreError> {
        let records = self.read_auth_records(None)?;
        self.auth.set(AuthState::from_records(
            records.enabled,
            records.revision,
            records.users,
            records.roles,
        ));
        Ok(())
    }

    /// Stages every record of `records` in place of the stored ones (snapshot import,
    /// into an empty store).
    pub(super) fn stage_auth_records(
        &self,
        batch: &mut WriteBatch,
        records: &AuthRecords,
    ) -> Result<(), StoreError> {
        let cf = self.cf(CF_META)?;
        batch.put_cf(cf, ENABLED_KEY, [u8::from(records.enabled)]);
        batch.put_cf(cf, REVISION_KEY, records.revision.to_be_bytes());
        for user in &records.users {
            batch.put_cf(
                cf,
                record_key(USER_PREFIX, &user.name),
                user.encode_to_vec(),
            );
        }
        for role in &records.roles {
            batch.put_cf(
                cf,
                record_key(ROLE_PREFIX, &role.name),
                role.encode_to_vec(),
            );
        }
        Ok(())
    }

    /// Applies one auth command against the applied state (the batch starts on a
    /// written store, see `store::write::flush_rules`). The caller writes the batch
    /// and then reloads the state.
    pub(super) fn stage_auth(
        &self,
        batch: &mut WriteBatch,
        request: &AuthRequest,
        log_index: u64,
    ) -> Result<AuthResult, StoreError> {
        let state = self.auth();
        let applied = state.apply(request, log_index)?;
        let cf = self.cf(CF_META)?;
        let mut revision = state.revision();
        for change in &applied.changes {
            match change {
                Change::Enabled(on) => batch.put_cf(cf, ENABLED_KEY, [u8::from(*on)]),
                Change::Revision(r) => {
                    revision = *r;
                    batch.put_cf(cf, REVISION_KEY, r.to_be_bytes());
                }
                Change::PutUser(user) => batch.put_cf(
                    cf,
                    record_key(USER_PREFIX, &user.name),
                    user.encode_to_vec(),
                ),
                Change::DeleteUser(name) => {
                    batch.delete_cf(cf, record_key(USER_PREFIX, name.as_bytes()))
                }
                Change::PutRole(role) => batch.put_cf(
                    cf,
                    record_key(ROLE_PREFIX, &role.name),
                    role.encode_to_vec(),
                ),
                Change::DeleteRole(name) => {
                    batch.delete_cf(cf, record_key(ROLE_PREFIX, name.as_bytes()))
                }
            }
        }
        Ok(AuthResult {
            revision,
            simple_token: applied.simple_token.unwrap_or_default(),
        })
    }
}
