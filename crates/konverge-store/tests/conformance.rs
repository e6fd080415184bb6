//! The shared conformance suite against [`MemStore`].

use konverge_store::MemStore;
use konverge_store::conformance::TestStore;

konverge_store::conformance_suite!(async { TestStore::new(MemStore::new(), ()) });
